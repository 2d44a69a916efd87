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
from advisor.kinds import baseline_plan
from advisor.session import optimize, round_measures
from advisor.verify import OBJECTIVE, interleave, judge, paired_interval

# A re-check may stop after EARLY_ROUNDS when even a stricter interval clears the bar: looking
# early spends part of the error rate, so the early look uses 99%, the full check 95%.
EARLY_ROUNDS = 3
EARLY_CONFIDENCE = 0.99

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


def clearly_holds(ratios: list[float], min_speedup: float) -> bool:
    return len(ratios) >= EARLY_ROUNDS and paired_interval(ratios, EARLY_CONFIDENCE)[1] >= min_speedup


def best_verified(payload: dict) -> Optional[dict]:
    return next((r for r in payload.get("recommendations", []) if r["verified"]), None)


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
        pairs = config.search.pairs
        progress(f"fingerprint unchanged ({now['digest']}); re-checking #1 ({'+'.join(best['recipes'])}), "
                 f"{EARLY_ROUNDS} to {pairs} interleaved rounds:")
        plans = {"#1": best["plan"]}
        rounds = interleave(baseline, plans, measure, EARLY_ROUNDS, progress, first_reference_run=probe, rounds_total=pairs,
                            measure_reference=measure_baseline)
        memory_fix = previous.get("memory_fix", False)
        basis = best.get("speedup_basis", OBJECTIVE)  # re-read as it was claimed (`speedup_basis`)
        early = (clearly_holds(rounds.ratios("#1", basis), config.search.min_speedup) and not memory_fix
                 and not rounds.failures("#1"))
        if early:
            progress(f"  the {EARLY_CONFIDENCE:.0%} interval after {EARLY_ROUNDS} rounds clears the bar: stopping early")
        else:
            rounds = rounds.then(interleave(baseline, plans, measure, pairs - EARLY_ROUNDS, progress,
                                            rounds_before=EARLY_ROUNDS, rounds_total=pairs,
                                            measure_reference=measure_baseline))
        disturbed = rounds.disturbed("#1")
        verdict = judge("#1", rounds.ratios("#1", basis), config.search.min_speedup, None, memory_fix,
                        [r.peak_memory_mb for r in rounds.candidates["#1"] if r.ok], config.constraints.max_memory_mb,
                        failures=rounds.failures("#1"), pairs=len(rounds.baseline), disturbed=disturbed)
        was = f"{best['speedup']:.2f}x (95% {best['interval'][0]:.2f}-{best['interval'][1]:.2f}x)"
        now_text = f"{verdict.speedup:.2f}x (95% {verdict.low:.2f}-{verdict.high:.2f}x)"
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
