"""The search's policies: what a person tuning by hand does between trials, as small named
objects in the manner of Optuna's pruners and terminators. After each trial, `after_trial` may
queue a plan or verify one; `stop_reason` says why the search may stop now ("" to go on).

- `StackSingles`: the recipes that helped alone, tried together.
- `EarlyVerification`: a trial far over the bar verified at once, so a user has advice early.
- `PlateauStop`: once a fix is verified and the search goes unbeaten, the best plan's one-step
  neighbours are measured, then the search stops.

Each policy's judgement is a pure function beside it (`stacked_singles`, `early_candidate`,
`plateau`, `neighbourhood_of`).
"""

from __future__ import annotations

from typing import Callable, Optional

from advisor import search
from advisor.config import AdvisorConfig
from advisor.failures import pruned
from advisor.plan import plan_key
from advisor.session.bundle import Session
from advisor.session.gate import gate_candidates, rounding_envelope, with_reference
from advisor.session.margins import EARLY_MARGIN, STACK_FLOOR
from advisor.session.planning import textbook_singles
from advisor.session.verification import Verified, verify_each
from advisor.verdict import astride
from advisor.verify import Envelope


class SearchPolicy:
    """Heard after each finished trial; may queue plans, verify, or say the search may stop."""

    def after_trial(self, study, finished: list[search.TrialResult]) -> None:
        """`finished`: the study's finished trials, those stopped midway too."""

    def stop_reason(self, study, finished: list[search.TrialResult]) -> str:
        return ""


class StackSingles(SearchPolicy):
    """Once the baseline and every textbook single have a trial: those that beat the baseline's
    trial by `search.min_speedup` are queued together, then, where that is another plan, those
    not shown to lose alone (at least STACK_FLOOR of it). Each stack is queued once."""

    def __init__(self, session: Session) -> None:
        self.singles = textbook_singles(session.facts)
        self.baseline = session.baseline
        self.floors = (session.config.search.min_speedup, STACK_FLOOR)

    def after_trial(self, study, finished: list[search.TrialResult]) -> None:
        for floor in self.floors:
            stack = stacked_singles(finished, self.singles, self.baseline, floor)
            if stack is not None:  # once: a plan already in the study is not queued again
                study.enqueue_trial(stack, skip_if_exists=True)


class EarlyVerification(SearchPolicy):
    """The first trial that clears the bar by EARLY_MARGIN, its numerics matching, is verified
    at once (one early verification at most, none with `verify_top: 0`); the search goes on
    once its verdict settles (its number is pinned at the end, where it still leads: `pin_early_fix`).
    A verdict that still straddles the bar after `search.pairs` rounds gives way (at an earlier
    look where those rounds would hardly decide it: `Stopping`'s futility): the search
    goes on, and the trial is a candidate again at its end, verified afresh beside the others
    (a noisy job's straddling verdict would otherwise hold the search for `search.max_pairs`
    rounds of its own, and share none of them)."""

    def __init__(self, session: Session, verified: Verified) -> None:
        self.session, self.verified, self.tried = session, verified, False

    def after_trial(self, study, finished: list[search.TrialResult]) -> None:
        session, verified = self.session, self.verified
        if self.tried or session.config.search.verify_top <= 0:  # the search's verdicts are this policy's alone
            return
        measured = [t for t in finished if not pruned(t.measurement)]
        base = next((t.measurement for t in measured if t.number == 0), None)
        early = early_candidate(measured, session.baseline, session.config,
                                lambda: rounding_envelope(session, base))
        if early is None:
            return
        self.tried = True
        session.progress(f"  trial #{early.number} clears the bar by far: verifying it now, then the search goes on")
        # beside the baseline's trial as the reference: an input-bound job's rounds measure the ideal too
        referenced = with_reference(session, measured)
        recommendations, runs, rejections = verify_each(referenced, [early], verified, give_way=True)
        if any(astride(r.status, r.interval[1], session.config.search.min_speedup) for r in recommendations):
            session.progress(f"  trial #{early.number}'s verdict straddles the bar after {len(runs)} rounds: "
                             "it is verified again beside the other candidates once the search is done")
            return
        verified.add(recommendations, runs, rejections)
        if any(r.verified for r in recommendations) and not referenced.reference.memory_fix:
            verified.to_pin[early.number] = runs  # its rounds stopped at the verdict: `pin_early_fix`


class PlateauStop(SearchPolicy):
    """At a plateau (`plateau`), first the best plan's untried one-step neighbours, then stop."""

    def __init__(self, session: Session, verified: Verified, patience: int) -> None:
        self.space, self.baseline = session.facts.space, session.baseline
        self.verified, self.patience = verified, patience
        self.around: Optional[search.TrialResult] = None  # whose neighbours the plateau measures

    def stop_reason(self, study, finished: list[search.TrialResult]) -> str:
        why = plateau(finished, self.verified.best_trial, self.patience, EARLY_MARGIN, self.verified.best_rate)
        if not why:
            return ""
        self.around = neighbourhood_of(finished, self.around)
        step = search.unmeasured_neighbour(study, self.space, self.baseline,
                                           {key: self.around.plan[key] for key in self.space})
        if step is None:
            return (f"{why}, and every plan one step from trial #{self.around.number} (the best where the search "
                    f"levelled off) is measured")
        study.enqueue_trial(step, skip_if_exists=True)
        return ""


def stacked_singles(trials: list[search.TrialResult], singles: dict[str, dict], baseline: dict,
                    floor: float = STACK_FLOOR) -> Optional[dict]:
    """The textbook settings of every recipe whose own trial was not shown to lose (at least
    `floor` of the baseline's trial), all at once: the trial a person tuning by hand runs next
    (inference mode helped, bf16 helped: both). None until the baseline and each single has a
    finished trial, or when fewer than two qualify. Where two set one key, the faster trial's
    setting holds. A pure function."""
    finished = {plan_key(t.plan): t for t in trials}
    base = finished.get(plan_key(baseline))
    own = [finished.get(plan_key({**baseline, **params})) for params in singles.values()]
    if base is None or not base.feasible or any(t is None for t in own):
        return None
    helped = sorted((t for t in own if t.feasible and t.samples_per_s >= base.samples_per_s * floor),
                    key=lambda t: t.samples_per_s, reverse=True)
    if len({t.number for t in helped}) < 2:
        return None
    space_keys = next(iter(singles.values())).keys()
    stack = {key: baseline[key] for key in space_keys}
    for trial in reversed(helped):  # the fastest last: its settings win a shared key
        stack.update({key: trial.plan[key] for key in space_keys if trial.plan[key] != baseline[key]})
    return stack


def early_candidate(trials: list[search.TrialResult], baseline: dict, config: AdvisorConfig,
                    envelope: Callable[[], Optional[Envelope]] = lambda: None) -> Optional[search.TrialResult]:
    """The fastest trial so far whose speed in its trial clears the bar by EARLY_MARGIN and whose
    numerics match the baseline trial's (within the job's rounding `envelope`, measured only for
    such a trial that fails without it): worth verifying at once. None while there is none, or when the
    baseline's trial did not run as it is (memory, SLO: those sessions verify at the end)."""
    base = next((t for t in trials if t.number == 0), None)
    if base is None or not base.measurement.ok or not base.feasible:
        return None
    bar = base.samples_per_s * config.search.min_speedup * EARLY_MARGIN
    fast = [t for t in trials if t.samples_per_s >= bar]
    if not fast:
        return None
    candidates, _ = gate_candidates(fast, base.measurement, baseline, config, memory_fix=False, envelope=envelope)
    return candidates[0] if candidates else None


def plateau(trials: list[search.TrialResult], verified_trial: Optional[int], patience: int, margin: float,
            verified_rate: float = 0.0) -> str:
    """Why the search may stop now, or "": a fix is verified and the last `patience` trials
    found no plan faster than the best so far by `margin` (the session's EARLY_MARGIN: a
    smaller gain between two single trials is within their noise). The verified fix counts at
    `verified_rate` where that is higher than its trial: a trial within `margin` of that is no
    progress either. A pure function."""
    if verified_trial is None or patience <= 0:
        return ""
    best, since = 0.0, 0
    for trial in sorted(trials, key=lambda t: t.number):
        if trial.feasible and trial.samples_per_s >= best * margin:
            best, since = max(best, trial.samples_per_s), 0
        else:
            since += 1
        if trial.number == verified_trial:
            best = max(best, verified_rate)
    if since < patience:
        return ""
    return (f"the search stops: a fix is verified and the last {since} trials found no plan "
            f"{margin:.2f}x faster than the best so far (search.patience: {patience})")


def neighbourhood_of(trials: list[search.TrialResult], around: Optional[search.TrialResult]) -> search.TrialResult:
    """The trial whose one-step neighbours a plateau measures before the search stops: the best
    when the plateau is first reached, and another only once a trial beats it by EARLY_MARGIN
    (one round per plateau: moving to every new best would walk along the noise)."""
    best = max((t for t in trials if t.feasible), key=lambda t: t.samples_per_s)
    return best if around is None or best.samples_per_s >= around.samples_per_s * EARLY_MARGIN else around
