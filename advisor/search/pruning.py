"""Stopping a trial midway that cannot end near the best: `BehindTheBest`, Optuna's pruner, with
the bar and the reach it judges by, and the watcher that hears a trial's running rate.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import optuna
from optuna.trial import FrozenTrial, TrialState

from advisor.failures import broke_memory_budget
from advisor.findings import MEMORY_FIX_HEADROOM
from advisor.measure import Measurement
from advisor.search.records import AT_MOST_ATTR, MEASUREMENT_ATTR, PLAN_ATTR, UNRUN_ATTR, WINDOW_ATTR, is_feasible_trial

PRUNE_SHARE = 0.7  # a trial that cannot end above 70% of the best trial's rate (the best over 1.4x faster: past a trial's noise) ...
PRUNE_FROM_PERCENT = 20  # ... judged from this share of its timed window, where what it can reach reads 0.82 of its final rate at worst ...
PRUNE_EARLY = (10, 0.63)  # ... and from 10% under 63%: there it reads 0.74 at worst (plans whose many workers ramp up), and
                          # 0.63 / 0.74 = 0.70 / 0.82 = 0.85: either bar stops only trials that end under 0.85 of the best
                          # (`python -m experiments.prune_trace replay`) ...
READS_AT_WORST = (0.74, 0.82)  # what `reachable` reads of a trial's final rate at worst: from 10%, and from 20% of its window
PRUNE_READINGS = 2  # ... and this many readings of its running rate (one stretch alone was once a slow step) ...
PRUNE_STRETCH_PERCENT = 5  # ... its pace read over stretches of at least this share of its window (not one step a warm queue served)


class BehindTheBest(optuna.pruners.BasePruner):
    """Prunes a trial that cannot end above its bar (`prune_bar`) of the best feasible finished
    trial's rate even if the rest of its timed window ran at the fastest pace any stretch of it has
    run so far (`reachable`): so far behind that its last steps cannot plausibly make it the winner.
    `max_memory_mb`: the study's memory budget, which decides which trials could be the winner (`best_rate`)."""

    def __init__(self, max_memory_mb: Optional[float] = None) -> None:
        self.max_memory_mb = max_memory_mb

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        window = trial.user_attrs.get(WINDOW_ATTR)
        best = best_rate(study, self.max_memory_mb)
        return bool(window and trial.intermediate_values and best is not None
                    and reachable(trial.intermediate_values, window) < prune_bar(trial.intermediate_values, window) * best)


def prune_bar(values: dict[int, float], window: dict) -> float:
    """The share of the best trial's rate under which a trial is stopped, at the point of its
    window its values have reached: lower early, where what it can reach is least certain. A bound
    a run reports itself (a service's best p95) is as certain early as late."""
    return PRUNE_SHARE if window["best_case"] or judged_late(values, window) else PRUNE_EARLY[1]


def judged_late(values: dict[int, float], window: dict) -> bool:
    """Whether a trial's values reach PRUNE_FROM_PERCENT of its window, where what it can reach is surer."""
    return max(values) >= PRUNE_FROM_PERCENT / 100 * window["of"]


def reachable(values: dict[int, float], window: dict) -> float:
    """The most a trial can still end at, from its intermediate values by steps of its window
    (`values`: step -> value); infinite while it is too early to tell.

    A rate over the window (samples/s) is bounded here: the steps to come, run at the fastest pace
    of any stretch of it so far (`fastest_pace`). A queue that workers filled during warm-up, or a
    cost paid once early in the window, make that pace kinder, never harsher. A run that bounds
    its own objective (a service's p95, from latencies only it holds) reports that bound: it is
    taken as it stands."""
    of, steps = window["of"], max(values)
    if window["best_case"]:
        return values[steps]
    if len(values) < PRUNE_READINGS or steps < PRUNE_EARLY[0] / 100 * of:
        return math.inf
    # (steps, seconds so far over samples per step: a scale that cancels out of the bound)
    elapsed = [(step, step / rate) for step, rate in sorted(values.items()) if rate > 0]
    pace = fastest_pace([(0, 0.0)] + elapsed, PRUNE_STRETCH_PERCENT / 100 * of)
    return of / (elapsed[-1][1] + (of - steps) / pace) if pace else math.inf


def final_at_most(values: dict[int, float], window: dict) -> float:
    """The most a trial stopped now could have ended at: what it can reach, over the share of its
    final rate that bound reads at worst (`READS_AT_WORST`); a bound the run reported itself, as it stands."""
    if window["best_case"]:
        return values[max(values)]
    return reachable(values, window) / READS_AT_WORST[1 if judged_late(values, window) else 0]


def fastest_pace(elapsed: list[tuple[float, float]], stretch: float) -> float:
    """The fastest steps per unit of time over a stretch from one reading to the first at least
    `stretch` steps after it (`elapsed`: (steps, time) in order, from (0, 0)); 0 if there is none."""
    paces = []
    for i, (s1, t1) in enumerate(elapsed):
        end = next(((s2, t2) for s2, t2 in elapsed[i + 1:] if s2 - s1 >= stretch), None)
        if end and end[1] > t1:
            paces.append((end[0] - s1) / (end[1] - t1))
    return max(paces, default=0.0)


def best_rate(study: optuna.Study, max_memory_mb: Optional[float] = None) -> Optional[float]:
    """The best rate of the finished trials that could be the advice: feasible, and, where the
    baseline's own trial (#0) broke the memory budget, clear of it by MEMORY_FIX_HEADROOM, as a
    memory fix must be to be verified (`session.gate`): a plan grazing the budget, faster but
    never the fix, must not stop one that fits."""
    finished = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if is_feasible_trial(t) and t.value is not None]
    if max_memory_mb is not None and baseline_broke_budget(study, max_memory_mb):
        finished = [t for t in finished if peak_mb(t) <= MEMORY_FIX_HEADROOM * max_memory_mb]
    return max((t.value for t in finished), default=None)


def baseline_broke_budget(study: optuna.Study, max_memory_mb: float) -> bool:
    """Whether the study's baseline trial (#0, run first) did not fit the memory budget."""
    first = next((t for t in study.get_trials(deepcopy=False) if t.number == 0 and MEASUREMENT_ATTR in t.user_attrs), None)
    return first is not None and broke_memory_budget(Measurement.from_dict(first.user_attrs[MEASUREMENT_ATTR]), max_memory_mb)


def peak_mb(trial: FrozenTrial) -> float:
    return trial.user_attrs.get(MEASUREMENT_ATTR, {}).get("peak_memory_mb", 0.0)


def watcher(trial: optuna.Trial) -> Callable[[dict], str]:
    """Reports a run's progress to its trial as intermediate values, by steps of the timed window
    (requests answered, for a service): its samples/s so far, or the best 1000 / p95 ms a service
    can still end at; says why to stop it when the study's pruner prunes it."""

    heard: dict[int, float] = {}

    def watch(progress: dict) -> str:
        steps, of = progress.get("steps") or 0, progress.get("of")
        if not progress.get("seconds") or not of or steps <= max(heard, default=0):
            return ""
        window = {"of": of, "best_case": "best" in progress}
        if not heard:
            trial.set_user_attr(WINDOW_ATTR, window)
        heard[steps] = progress.get("best") or progress["samples"] / progress["seconds"]
        trial.report(heard[steps], steps)
        if not trial.should_prune():
            return ""
        trial.set_user_attr(UNRUN_ATTR, unrun_seconds(progress))
        trial.set_user_attr(AT_MOST_ATTR, final_at_most(heard, window))
        done = f"after {100 * steps / of:.0f}% of its window"
        told = (f"1000 / p95 ms at most {heard[steps]:,.0f} by its end ({done}, the rest answered at once)"
                if window["best_case"] else
                f"{heard[steps]:,.0f}/s {done}, at most {reachable(heard, window):,.0f}/s by its end at its fastest pace so far")
        best = best_rate(trial.study, getattr(trial.study.pruner, "max_memory_mb", None))
        return f"{told}: under {prune_bar(heard, window):.0%} of the best trial's {best:,.0f}"

    return watch


def unrun_seconds(progress: dict) -> float:
    """The rest of a run's timed window at its pace so far: what stopping it now saves."""
    return progress["seconds"] * (progress["of"] - progress["steps"]) / progress["steps"]


def pruned_trials(study: optuna.Study) -> tuple[tuple[int, dict, str, float], ...]:
    """The trials stopped midway, clearly losing: (number, plan, why, seconds of window left unrun)."""
    return tuple((t.number, t.user_attrs.get(PLAN_ATTR, {}), t.user_attrs.get(MEASUREMENT_ATTR, {}).get("reason", ""),
                  t.user_attrs.get(UNRUN_ATTR, 0.0))
                 for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)))
