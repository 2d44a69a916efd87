"""Re-tuning: notice what changed since the last session, re-check the advice, tune again when needed.

With the workload's fingerprint unchanged, the current best recommendation is re-verified
against the baseline in a short interleaved check: it holds, or it has regressed. With the
fingerprint changed, a new session runs, warm-started with the previous best plans (enqueued
right after the baseline), and the report says what changed and how the advice changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Optional

from advisor import search
from advisor.config import AdvisorConfig
from advisor.errors import UserError
from advisor.fingerprint import describe_changes, fingerprint, workload_section
from advisor.harness import kept
from advisor.kinds import baseline_plan
from advisor.session import optimize, round_measures
from advisor.verdict import Verdict, judge, level_words, levels_of, look_confidence, look_schedule, reported_confidence, settled
from advisor.verify import OBJECTIVE, interleave

EXIT_OK = 0
EXIT_REGRESSED = 3

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RetuneResult:
    status: str  # "holds" | "regressed" | "unchecked: the machine was busy" | "retuned" | "regressed, not fixed" | "nothing to re-check"
    changes: tuple[str, ...]
    previous: dict  # the previous session's payload
    detail: str
    new_session: Optional[object] = None  # a SessionResult when a new session ran
    verdict: Optional[object] = None
    extra: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSED if self.status.startswith("regressed") else EXIT_OK


def best_verified(payload: dict) -> Optional[dict]:
    return next((r for r in payload.get("recommendations", []) if r["verified"]), None)


def recheck(config: AdvisorConfig, best: dict, baseline: dict, probe, measures: tuple[Callable, Callable],
            memory_fix: bool, progress: Progress, said: str = "") -> tuple[Verdict, tuple[int, float]]:
    """The previous #1 measured again against the baseline, in interleaved rounds that stop by the
    verification's own design (`advisor.verdict.design`): a look after FIRST_LOOK rounds and one
    at `search.pairs`, each at Pocock's level for the two, stopping at the first where the verdict
    is settled; the interval is reported at the level the stop earned (`reported_confidence`).
    `measures`: the candidate's and the baseline's (`round_measures`); `probe`, the baseline's run just made."""
    pairs, bar = config.search.pairs, config.search.min_speedup
    schedule = look_schedule(pairs, pairs)
    measure, measure_baseline = measures
    progress(f"{said}re-checking #1 ({'+'.join(best['recipes'])}), {schedule[0]} to {pairs} interleaved rounds:")
    plans = {"#1": best["plan"]}
    basis = best.get("speedup_basis", OBJECTIVE)  # re-read as it was claimed (`speedup_basis`)
    try:
        rounds = interleave(baseline, plans, measure, schedule[0], progress, first_reference_run=probe, rounds_total=pairs,
                            measure_reference=measure_baseline)
        early = not memory_fix and len(schedule) > 1 and settled(rounds.ratios("#1", basis), bar, rounds.failures("#1"),
                                                                 look_confidence(len(schedule)))
        if early:
            progress(f"  the verdict is settled after {schedule[0]} rounds: stopping early")
        elif len(rounds.baseline) < pairs:
            rounds = rounds.then(interleave(baseline, plans, measure, pairs - schedule[0], progress,
                                            rounds_before=schedule[0], rounds_total=pairs, measure_reference=measure_baseline))
    finally:
        kept.close_all()
    disturbed = rounds.disturbed("#1")
    verdict = judge("#1", rounds.ratios("#1", basis), bar, None, memory_fix,
                    [r.peak_memory_mb for r in rounds.candidates["#1"] if r.ok], config.constraints.max_memory_mb,
                    failures=rounds.failures("#1"), pairs=len(rounds.baseline), disturbed=disturbed,
                    confidence=reported_confidence(schedule, len(rounds.baseline), early or len(schedule) == 1))
    return verdict, disturbed


def retune(config: AdvisorConfig, previous: dict, progress: Progress = lambda line: None) -> RetuneResult:
    """Re-checks `previous` (a recommendations.json payload) against the workload as it is now."""
    # With the config's workload section as it was, the baseline is the previous session's plan
    # (defaults spelled out), so the probe can stand in for the re-check's first baseline run.
    same_section = previous["fingerprint_components"].get("workload") == workload_section(config)
    baseline = dict(previous["baseline"]["plan"]) if same_section else baseline_plan(config)
    progress("measuring the baseline as it is now ...")
    measure, measure_baseline = round_measures(config)  # the baseline: the job as the user runs it, whatever the budget
    probe = measure_baseline(baseline)
    if not probe.ok:
        before = ("it failed in the last session too" if previous.get("baseline_failure") and not previous.get("memory_fix")
                  else "it ran in the last session")
        raise UserError(f"the baseline does not run ({probe.reason}); {before}: fix the workload, then retune")
    now = fingerprint(config, probe.environment)
    changes = tuple(describe_changes(previous["fingerprint_components"], now["components"]))
    best = best_verified(previous)

    if not changes:
        if best is None:
            return RetuneResult("nothing to re-check", changes, previous, "the last session verified no fix; nothing changed since")
        verdict, disturbed = recheck(config, best, baseline, probe, (measure, measure_baseline),
                                     previous.get("memory_fix", False), progress, f"fingerprint unchanged ({now['digest']}); ")
        was = f"{best['speedup']:.2f}x ({levels_of([best])} {best['interval'][0]:.2f}-{best['interval'][1]:.2f}x)"
        now_text = f"{verdict.speedup:.2f}x ({level_words([verdict.confidence])} {verdict.low:.2f}-{verdict.high:.2f}x)"
        busy = disturbed[0] > 0  # a busy machine proves nothing either way: no alarm
        status = "holds" if verdict.verified else "unchecked: the machine was busy" if busy else "regressed"
        return RetuneResult(status, changes, previous, f"#1 {'+'.join(best['recipes'])}: was {was}, now {now_text}; {verdict.reason}",
                            verdict=verdict)

    progress("the workload changed: " + "; ".join(changes))
    progress("re-tuning, warm-started with the previous best plans:")
    search.remove_study(config)
    warm = tuple(r["plan"] for r in previous.get("recommendations", []))
    session = optimize(config, progress, warm_start=warm)
    new_best = next((r for r in session.recommendations if r.verified), None)
    old_text = f"{'+'.join(best['recipes'])} {best['speedup']:.2f}x" if best else "no verified fix"
    if new_best is None:
        status = "regressed, not fixed" if best else "retuned"
        detail = f"advice was {old_text}; after the change no fix clears the bar"
    else:
        status = "retuned"
        detail = f"advice was {old_text}; now {'+'.join(new_best.recipes)} {new_best.speedup:.2f}x ({json.dumps(new_best.changes)})"
    return RetuneResult(status, changes, previous, detail, new_session=session)
