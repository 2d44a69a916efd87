"""The sequential design of a verification: when it looks at its rounds, the level each look's
interval is drawn at (Pocock's boundaries), when a verdict is settled, and how many rounds pin
the adopted speedup down. Verification (`advisor.session.verification.Stopping`), the ranking's
shares and `advisor retune` all stop by these rules.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Callable, Optional, Sequence

from advisor.verdict.statistics import PLAIN_LEVEL, log_spread, paired_interval, t_quantile

FIRST_LOOK = 3  # rounds after which a verification may stop, when every verdict is already settled
# Pocock's constant boundaries for 1 to 6 looks at a two-sided 5% (Pocock 1977, Biometrika 64:191):
# every look's interval is drawn at the same level, wide enough that all looks together miss the
# truth at most 5% of the time (`python -m experiments.calibrate --coverage` measures ours).
POCOCK = (1.960, 2.178, 2.289, 2.361, 2.413, 2.453)
MOST_PINNED = 1000  # rounds_to_pin's answer at most (a schedule ends far sooner)
LOOK_GROWTH = 1.6  # each look past search.pairs has this many times the rounds of the one before
FUTILE_UNDER = 0.1  # a verdict this unlikely to be decided by the schedule's end is not worth its rounds


def look_schedule(pairs: int, most: int) -> tuple[int, ...]:
    """The rounds after which a verification looks: FIRST_LOOK, `pairs`, then growing by
    LOOK_GROWTH up to `most` (6 looks at most: Pocock's table)."""
    looks = [FIRST_LOOK, pairs]
    while looks[-1] < most:
        looks.append(min(most, math.ceil(looks[-1] * LOOK_GROWTH)))
    return tuple(sorted(set(looks)))[:len(POCOCK)]


def look_confidence(looks: int) -> float:
    """Each look's two-sided confidence under Pocock's boundary for that many looks."""
    return math.erf(POCOCK[min(looks, len(POCOCK)) - 1] / math.sqrt(2))


def reported_confidence(schedule: tuple[int, ...], rounds: int, settled_there: bool) -> float:
    """The level of the interval a verification reports, having stopped after `rounds`: where
    every verdict was settled there (at Pocock's level for the whole schedule), Pocock's level
    for the looks taken so far, the stop itself counted as one (a stop between looks, at the
    rounds `rounds_to_pin` asked, takes the place of the look after it), PLAIN_LEVEL at the first; otherwise (the
    schedule's end, or its time budget) the whole schedule's. Stopping at a settled look, the
    narrower interval says the same verdict; a verification that stops at its first look is not
    widened for looks it never took. `python -m experiments.calibrate --coverage` measures the
    coverage."""
    looks = min(len(schedule), sum(look < rounds for look in schedule) + 1)
    return look_confidence(looks if settled_there else len(schedule))


def level_stopping_at(schedule: tuple[int, ...], rounds: int) -> float:
    """The level a verification reports where it stops settled after `rounds`."""
    return reported_confidence(schedule, rounds, True)


def settled(ratios: Sequence[float], min_speedup: float, failures: Sequence[str] = (),
            confidence: float = PLAIN_LEVEL) -> bool:
    """Whether more rounds could not change a speed verdict: a failed run (flaky, whatever comes
    next), or an interval wholly above or wholly below `min_speedup`.

    A verification looks at the rounds of its `look_schedule` and stops at the first look where
    every verdict is settled. Several looks at the same candidate would let chance verify it
    more often than one, so every look uses Pocock's level for that many looks
    (`look_confidence`): all of them together cover at least PLAIN_LEVEL."""
    if failures:
        return True
    if len(ratios) < 2:
        return False
    _, low, high = paired_interval(ratios, confidence)
    return low >= min_speedup or high < min_speedup


def rounds_to_pin(claims: dict[str, Sequence[float]], min_speedup: float, precision: float,
                  level_at: Callable[[int], float] = lambda rounds: PLAIN_LEVEL) -> tuple[Optional[str], int]:
    """The candidate a user would adopt (the fastest whose interval clears `min_speedup`), and
    the fewest rounds whose interval would reach no further than `precision` either side of its
    speedup, at the spread its rounds so far show: the interval at n rounds is Student's t with
    n - 1 degrees of freedom at the level a verification stopping there reports (`level_at(n)`),
    over the root of n. (None, 0) when none clears the bar or `precision` is 0 (off).

    A verdict settles as soon as the interval clears the bar, often after 3 rounds with an
    interval of +-20-40%: the number a user plans on, and re-measures, deserves the rounds that
    pin it down. Both the root of the rounds and the t quantile narrow it: at 3 rounds the
    quantile is 4.3 (95%), at 8 it is 2.4, so scaling the 3-round width by the root alone asked
    (4.3 / 2.4)**2 = 3.3 times the rounds needed. The rounds are fixed once, from the rounds
    that settled the verdict: stopping whenever a later interval happened to look narrow would
    stop on rounds that agree by chance, and the intervals would cover less than they say
    (`python -m experiments.calibrate --coverage` measures it)."""
    if precision <= 0:
        return None, 0
    cleared = {name: paired_interval(ratios, level_at(len(ratios))) for name, ratios in claims.items() if len(ratios) >= 2}
    cleared = {name: interval for name, interval in cleared.items() if interval[1] >= min_speedup}
    if not cleared:
        return None, 0
    best = max(cleared, key=lambda name: cleared[name][0])
    spread, reach = log_spread([math.log(r) for r in claims[best]]), math.log1p(precision)
    rounds = max(len(claims[best]), math.ceil((NormalDist().inv_cdf(0.5 + level_at(len(claims[best])) / 2) * spread / reach) ** 2))
    while rounds < MOST_PINNED and t_quantile(0.5 + level_at(rounds) / 2, rounds - 1) * spread / math.sqrt(rounds) > reach:
        rounds += 1  # from the normal's answer, which the t's can only exceed: a few steps at most
    return best, rounds


def chance_to_settle(ratios: Sequence[float], min_speedup: float, rounds_at_end: int, level_at_end: float,
                     above_only: bool = False) -> float:
    """The chance that a verdict is settled after `rounds_at_end` rounds (its interval then at
    `level_at_end` wholly above or wholly below `min_speedup`; with `above_only`, wholly above:
    verified), were its rounds to go on as those so far (their mean and spread); 1.0 where it is
    settled already or has too few rounds to tell. Predictive, not the current trend alone: the
    true mean is as uncertain as the rounds so far say, so the final mean of n rounds of N lies
    about theirs with sd spread * sqrt((N - n) / (N n)). A pure function."""
    logs, rounds = [math.log(r) for r in ratios], len(ratios)
    spread = log_spread(logs)
    if rounds < 2 or spread == 0.0 or rounds >= rounds_at_end:
        return 1.0
    _, low, high = paired_interval(ratios, level_at_end)
    if low >= min_speedup or high < min_speedup:
        return 1.0
    reach = t_quantile(0.5 + level_at_end / 2, rounds_at_end - 1) * spread / math.sqrt(rounds_at_end)
    final = NormalDist(math.fsum(logs) / rounds, spread * math.sqrt((rounds_at_end - rounds) / (rounds_at_end * rounds)))
    bar = math.log(min_speedup)
    return (1.0 - final.cdf(bar + reach)) + (0.0 if above_only else final.cdf(bar - reach))
