"""A fix's recipes judged by leaving each out: the rule that says when rounds of a fix beside
itself without each recipe have shown enough. One rule for the rounds run beside its
verification (`verification._interleaved`) and for those of its own (`ranking._leave_one_out`),
so that the first stops where the second would. Pure functions of the rounds."""

from __future__ import annotations

import math

from advisor.failures import out_of_memory
from advisor.session.results import Progress
from advisor.verdict import FIRST_LOOK, FUTILE_UNDER, chance_to_settle, chance_words, look_confidence, paired_interval
from advisor.verify import Rounds


def share_looks(pairs: int) -> tuple[int, ...]:
    """The rounds after which the shares are looked at: FIRST_LOOK, then `pairs`."""
    return tuple(sorted({min(FIRST_LOOK, pairs), pairs}))


def factors_of(rounds: Rounds, recipe: str) -> list[float]:
    """The fix over itself without `recipe`, round by round."""
    return [1 / ratio for ratio in rounds.ratios(f"without {recipe}") if ratio > 0]


def shares_done(rounds: Rounds, recipes: tuple[str, ...], schedule: tuple[int, ...], progress: Progress) -> bool:
    """Whether the rounds so far are enough: every share settled, or none still open likely to be."""
    return shares_settled(rounds, recipes, schedule) or shares_futile(rounds, recipes, schedule, progress)


def shares_settled(rounds: Rounds, recipes: tuple[str, ...], schedule: tuple[int, ...]) -> bool:
    """At a look, whether every recipe's factor is clear of 1x (or its absence broke the memory
    budget), with every run of the rounds finished: more rounds would tell nothing new."""
    done = len(rounds.baseline)
    if done not in schedule or not all(run.ok for run in rounds.baseline):
        return False
    level = look_confidence(len(schedule))
    for factors in judged_factors(rounds, recipes).values():
        if len(factors) < done:
            return False
        _, low, high = paired_interval(factors, level)
        if low <= 1.0 <= high:
            return False
    return True


def shares_futile(rounds: Rounds, recipes: tuple[str, ...], schedule: tuple[int, ...], progress: Progress) -> bool:
    """At a look before the last, whether every factor still astride 1x is unlikely (under
    FUTILE_UNDER) to be clear of it by the last (`chance_to_settle`): on a job whose runs swing,
    the rounds left would most likely leave every share "not shown", at their full cost. The
    intervals are then drawn at the whole schedule's level, as where the rounds run out. Said
    when it stops them."""
    done = len(rounds.baseline)
    if done not in schedule[:-1] or not all(run.ok for run in rounds.baseline):
        return False
    level, last, astride = look_confidence(len(schedule)), schedule[-1], {}
    for recipe, factors in judged_factors(rounds, recipes).items():
        _, low, high = paired_interval(factors, level) if len(factors) >= 2 else (1.0, 0.0, math.inf)
        if low <= 1.0 <= high:  # one clear of 1x already holds nothing up
            astride[recipe] = chance_to_settle(factors, 1.0, last, level)
    if not astride or max(astride.values()) >= FUTILE_UNDER:
        return False
    progress(f"  the shares' rounds stop: {last} rounds would hardly show any ("
             + ", ".join(f"{recipe}: {chance_words(chance)}" for recipe, chance in astride.items()) + ")")
    return True


def judged_factors(rounds: Rounds, recipes: tuple[str, ...]) -> dict[str, list[float]]:
    """Each recipe's factors so far, but for those whose absence broke the memory budget (needed, whatever the factor)."""
    return {recipe: factors_of(rounds, recipe) for recipe in recipes
            if not any(out_of_memory(run) for run in rounds.candidates[f"without {recipe}"])}
