"""Plans not worth measuring: a variant of a plan that already ran clearly slower than the
baseline. A plan that makes every change a losing plan made, and more, is judged by its changes
beside the losing ones: the same plan without them (`threads=1` lost alone; `workers=4,
threads=1` is `workers=4` with that loss on top), which the search measures instead. The search
tells such a plan skipped and says which trial ruled it out; the plan counts as decided, never
as measured.

It assumes the losing changes do not turn into a gain beside the others. Only a loss past one
trial's noise rules a plan out (the session's RULE_OUT_UNDER: both the loser's trial and the
baseline's are single draws), and only against the baseline's own trial. A trial stopped midway
(`pruning`) counts at the most it could have ended at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from advisor.plan import changes_of, changes_text, plan_key


@dataclass(frozen=True)
class Loser:
    """A measured plan that ran clearly slower than the baseline: its trial, its changes to the
    baseline, and its rate over the baseline's trial."""

    number: int
    changes: dict
    ratio: float


def losers(rated: list[tuple[int, dict, float]], baseline: dict, under: float) -> list[Loser]:
    """The trials (`rated`: number, plan, and its rate, or the most it could have ended at where
    it was stopped midway) under `under` times the baseline trial's rate, slowest first; none
    until the baseline's trial has a rate. A pure function."""
    base = next((rate for _, plan, rate in rated if plan_key(plan) == plan_key(baseline)), 0.0)
    if base <= 0:
        return []
    slow = [Loser(number, changes_of(plan, baseline), rate / base) for number, plan, rate in rated if rate < under * base]
    return sorted((loser for loser in slow if loser.changes), key=lambda loser: loser.ratio)


def dominating(plan: dict, slow: list[Loser], baseline: dict) -> Optional[Loser]:
    """The slowest loser whose every change `plan` makes too, with more besides; None if none."""
    changes = changes_of(plan, baseline).items()
    return next((loser for loser in slow if loser.changes.items() < changes), None)


def ruled_out_reason(loser: Loser) -> str:
    return (f"ruled out: it adds to trial #{loser.number} ({changes_text(loser.changes)}), which ran at most "
            f"{loser.ratio:.2f}x the baseline's trial; the same plan without those changes is measured instead")
