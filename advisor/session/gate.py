"""The numerics gate: whose results the candidates must reproduce, and which trials may go on to
verification (distinct, feasible, faster, their results unchanged)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from advisor import search
from advisor.config import AdvisorConfig
from advisor.failures import broke_memory_budget, broken_constraint
from advisor.findings import MEMORY_FIX_HEADROOM
from advisor.kinds import kind_of
from advisor.measure import Measurement
from advisor.plan import active_recipes, combined_risk, names, plan_key
from advisor.session.bundle import Reference, Session
from advisor.session.results import Rejection
from advisor.verify import Envelope, NumericsResult


def with_reference(session: Session, trials: list[search.TrialResult]) -> Session:
    """The session with its `Reference`: the baseline's trial decides whether the baseline fits,
    and, where it broke a constraint, the baseline is run once without it, as the reference."""
    config, facts, progress = session.config, session.facts, session.progress
    max_memory = config.constraints.max_memory_mb
    base_trial = next((t for t in trials if t.number == 0), None)
    base_run = base_trial.measurement if base_trial else facts.evidence.full
    memory_fix = broke_memory_budget(base_run, max_memory)
    uncapped, broken = None, broken_constraint(base_run, max_memory)
    if broken:
        progress(f"the baseline breaks {broken}: running it once without it, as the reference ...")
        uncapped = session.measure_reference(facts.baseline)
    run, note = _numerics_reference(base_run, uncapped, trials, facts.baseline, broken or "the memory budget")
    if memory_fix:
        progress(f"the baseline does not fit ({base_run.reason or f'peak {base_run.peak_memory_mb:,.0f} MB'}); "
                 f"numerics are compared with {note}")
    diagnoses = session.diagnoses
    input_bound = bool(diagnoses) and diagnoses[0].bottleneck.startswith("input")
    with_ideal = input_bound and bool(facts.evidence.derived.get("ideal_samples_per_s"))
    return dataclasses.replace(session, reference=Reference(base_run, uncapped, run, note, memory_fix, with_ideal))


def rounding_envelope(session: Session, reference: Optional[Measurement]) -> Optional[Envelope]:
    """How far rounding alone moves the reference's results (a trajectory: training kinds),
    measured once per reference plan, when first asked, and said in a progress line."""
    if reference is None:
        return None
    key = plan_key(reference.plan)
    if key not in session.envelopes:
        session.progress("measuring how far rounding alone moves the results (the reference, every weight nudged by "
                         "one unit in the last place) ...")
        session.envelopes[key] = kind_of(session.config.kind).envelope(session.config, reference)
        if session.envelopes[key] is not None:
            session.progress(f"  {session.envelopes[key].describe()}")
    return session.envelopes[key]


def _numerics_reference(base_run: Measurement, uncapped: Optional[Measurement], trials: list[search.TrialResult],
                       baseline: dict, constraint: str = "the memory budget") -> tuple[Optional[Measurement], str]:
    """The run whose results every candidate must reproduce: the baseline's trial; where the
    baseline broke advisor's memory budget, the baseline run once without that cap; where it
    fits nowhere (the device's own memory), the fastest trial whose recipes are all exact
    (micro-batches, recomputation), which computes the same step in less memory."""
    if base_run.ok:
        return base_run, "the baseline"
    if uncapped is not None and uncapped.ok:
        return uncapped, f"the baseline run once without {constraint}"
    exact = [t for t in trials if t.feasible and active_recipes(t.plan, baseline)
             and combined_risk(active_recipes(t.plan, baseline)) == "exact"]
    if not exact:
        return None, "nothing: the baseline ran out of memory and no exact fix fitted"
    best = max(exact, key=lambda t: t.samples_per_s)
    return best.measurement, f"trial #{best.number} ({'+'.join(names(active_recipes(best.plan, baseline)))}, exact)"


def gate_candidates(
    trials: list[search.TrialResult],
    reference: Optional[Measurement],
    baseline: dict,
    config: AdvisorConfig,
    memory_fix: bool,
    envelope: Callable[[], Optional[Envelope]] = lambda: None,
) -> tuple[list[search.TrialResult], list[Rejection]]:
    """Distinct feasible plans that change something, best first; numerics failures set aside
    (judged within the job's rounding `envelope`, asked for only when one fails without it).
    A memory fix must also leave the memory-bound band, not graze the budget."""
    seen, candidates, rejected = set(), [], []
    budget = config.constraints.max_memory_mb
    for trial in sorted(trials, key=lambda t: t.samples_per_s, reverse=True):
        recipes = active_recipes(trial.plan, baseline)
        key = plan_key(trial.plan)
        if not recipes or key in seen:
            continue
        seen.add(key)
        if not trial.feasible:
            reason = search.infeasible_reason(trial.measurement, budget)
            rejected.append(Rejection.of(trial, baseline, reason))
            continue
        if reference is None:
            rejected.append(Rejection.of(trial, baseline, "numerics: no run that fitted to compare with"))
            continue
        numerics = judged(trial.measurement, reference, combined_risk(recipes), config, envelope)
        if not numerics.passed:
            rejected.append(Rejection.of(trial, baseline, f"numerics: {numerics.note}"))
            continue
        if not memory_fix and trial.samples_per_s <= reference.samples_per_s:
            continue  # slower than the baseline in its trial: not worth verifying
        if memory_fix and budget is not None and trial.measurement.peak_memory_mb > MEMORY_FIX_HEADROOM * budget:
            continue
        candidates.append(trial)
    return candidates, rejected


def compare_outputs(candidate: Measurement, baseline: Measurement, risk: str, config: AdvisorConfig,
                    envelope: Optional[Envelope] = None) -> NumericsResult:
    """Whether a candidate's results are the baseline's, as its kind compares them (within the
    job's rounding envelope, where there is one)."""
    return kind_of(config.kind).compare(candidate, baseline, risk, config, envelope)


def judged(candidate: Measurement, baseline: Measurement, risk: str, config: AdvisorConfig,
           envelope: Callable[[], Optional[Envelope]] = lambda: None) -> NumericsResult:
    """The comparison at the fixed tolerances; where it fails, again within the job's rounding
    envelope, if the job amplifies rounding (the envelope only ever widens a tolerance, so it is
    measured only for a candidate that fails without it)."""
    fixed = compare_outputs(candidate, baseline, risk, config)
    if fixed.passed:
        return fixed
    rounding = envelope()
    return compare_outputs(candidate, baseline, risk, config, rounding) if rounding and rounding.amplifies else fixed


def worst_numerics(runs, baseline_runs, risk, config, envelope: Callable[[], Optional[Envelope]] = lambda: None):
    runs, baseline_runs = kind_of(config.kind).compared_runs(runs, baseline_runs)
    results = [judged(c, b, risk, config, envelope) for c, b in zip(runs, baseline_runs) if c.ok and b.ok]
    return max(results, key=lambda r: (not r.passed, r.max_rel_diff), default=None)
