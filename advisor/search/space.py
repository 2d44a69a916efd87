"""The search space: its parameters as JSON, its size and plans, the plans left to measure, and
a trial's plan suggested from it.
"""

from __future__ import annotations

import itertools
import math
from typing import Optional

import optuna
from optuna.trial import FrozenTrial, TrialState

from advisor.config import AdvisorConfig
from advisor.plan import plan_key, unique
from advisor.recipes.base import Choice, IntRange, Param
from advisor.search.records import PLAN_ATTR, RULED_OUT_ATTR, counts


def space_to_json(space: dict[str, Param]) -> dict:
    return {
        key: {"int": [p.low, p.high, p.log]} if isinstance(p, IntRange) else {"choice": list(p.options)}
        for key, p in space.items()
    }


def space_from_json(data: dict) -> dict[str, Param]:
    return {
        key: IntRange(*spec["int"]) if "int" in spec else Choice(tuple(spec["choice"])) for key, spec in data.items()
    }


def values_of(param: Param) -> list:
    return list(range(param.low, param.high + 1)) if isinstance(param, IntRange) else list(param.options)


def space_size(space: dict[str, Param]) -> int:
    return math.prod(len(values_of(param)) for param in space.values())


def every_plan(space: dict[str, Param]) -> list[dict]:
    """All parameter combinations, for a space small enough to measure whole."""
    keys = list(space)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(values_of(space[k]) for k in keys))]


ENUMERABLE = 4096  # spaces up to this size are enumerated to count their distinct plans


def distinct_plans(space: dict[str, Param]) -> int:
    """How many plans of the space differ in what they do (plans that differ only in keys that
    do nothing, such as Dask partitions without Dask, count once); spaces too large to
    enumerate are counted by their size."""
    size = space_size(space)
    return len(unique(every_plan(space))) if size <= ENUMERABLE else size


def next_grid_plan(study: optuna.Study, space: dict[str, Param], baseline: dict) -> Optional[dict]:
    """The first plan of the whole space, in `every_plan`'s order, that no trial has measured, is
    measuring or has queued; None when every one has. Queued one at a time, when the queue is
    empty, so the plans a policy queues (the helpful singles stacked, a plateau's neighbours) run
    before the rest of the grid, not after it."""
    done = taken_plans(study, baseline)
    return next((params for params in every_plan(space) if plan_key({**baseline, **params}) not in done), None)


def has_waiting(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def trial_budget(config: AdvisorConfig, space: dict[str, Param]) -> int:
    """No more trials than there are distinct plans."""
    return min(config.search.trials, distinct_plans(space))


def taken_plans(study: optuna.Study, baseline: dict) -> set[str]:
    """The identities of the plans measured, being measured, queued or ruled out in the study."""
    def plan(t: FrozenTrial) -> dict:
        return t.user_attrs.get(PLAN_ATTR) or {**baseline, **t.system_attrs.get("fixed_params", {})}

    return {plan_key(plan(t))
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED,
                                                              TrialState.WAITING, TrialState.FAIL))
            if (t.state != TrialState.FAIL and counts(t)) or t.state == TrialState.WAITING or RULED_OUT_ATTR in t.user_attrs}


def neighbours(params: dict, space: dict[str, Param]) -> list[dict]:
    """The plans one step from `params`: one knob moved to an adjacent value (an integer by one,
    or by a factor of two on a log range; a choice of numbers to the option beside it), or a
    choice of anything else swapped for another of its options."""
    steps = []
    for key, param in space.items():
        value = params[key]
        if isinstance(param, IntRange):
            moves = (value // 2, value * 2) if param.log else (value - 1, value + 1)
            moves = [v for v in moves if param.low <= v <= param.high and v != value]
        else:
            moves = adjacent_options(param.options, value)
        steps += [{**params, key: move} for move in moves]
    return steps


def adjacent_options(options: tuple, value: object) -> list:
    """The options one step from `value`: where the options are all numbers (fetch threads 1, 2,
    4 ... 64; a prefetch depth), the one below and the one above it in order, as an integer
    range moves; else every other option (a mode, a flag, "off" among numbers). A pure function."""
    if value in options and all(isinstance(o, (int, float)) and not isinstance(o, bool) for o in options):
        ordered = sorted(options)
        place = ordered.index(value)
        return [ordered[i] for i in (place - 1, place + 1) if 0 <= i < len(ordered)]
    return [option for option in options if option != value]


def unmeasured_neighbour(study: optuna.Study, space: dict[str, Param], baseline: dict, params: dict) -> Optional[dict]:
    """The first plan one step from `params` that does something new: none measured, being
    measured or queued does the same."""
    done = taken_plans(study, baseline) | {plan_key({**baseline, **params})}
    return next((step for step in neighbours(params, space)
                 if plan_key({**baseline, **step}) not in done), None)


def suggest(trial: optuna.Trial, space: dict[str, Param]) -> dict:
    params = {}
    for key, param in space.items():
        if isinstance(param, IntRange):
            params[key] = trial.suggest_int(key, param.low, param.high, log=param.log)
        elif isinstance(param, Choice):
            params[key] = trial.suggest_categorical(key, list(param.options))
        else:
            raise TypeError(f"unknown parameter kind for {key}: {param!r}")
    return params


def unmeasured_plan(study: optuna.Study, space: dict[str, Param], baseline: dict,
                    seed: int, draws: int = 200) -> Optional[dict]:
    """Parameters drawn at random (seeded) whose plan no trial has measured or is measuring;
    None when `draws` draws find none (the space is nearly spent)."""
    import random

    done = taken_plans(study, baseline)
    rng = random.Random(seed)
    for _ in range(draws):
        params = {key: rng.choice(values_of(param)) for key, param in space.items()}
        if plan_key({**baseline, **params}) not in done:
            return params
    return None
