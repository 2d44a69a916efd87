"""The judge: one candidate's paired ratios and what they support, as a `Verdict` whose `status`
says which rule decided it and whose `confidence` is the level its interval was drawn at (the
sequential design's, `advisor.verdict.design`). A pure function."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Optional, Sequence

from advisor.verdict.design import FIRST_LOOK
from advisor.verdict.statistics import PLAIN_LEVEL, interval_words, level_words, paired_interval
from advisor.verify import NumericsResult


class Status(str, Enum):
    """Which rule decided a verdict (the value travels in payloads and MLflow as its text)."""

    VERIFIED = "verified"  # the interval clears the bar (a memory fix: every run under the budget)
    SHORT = "short"  # the interval does not clear the bar
    FLAKY = "flaky"  # a run of the candidate crashed, hung or broke the budget
    BUSY = "busy"  # other processes disturbed the rounds: shown, never verified
    NO_PAIRS = "no pairs"  # no successful pair, or fewer than a verdict needs
    NUMERICS = "numerics"  # its results differ from the reference's
    SEMANTICS = "changes semantics"  # it changes what is computed: advice, never verified automatically
    OVER_BUDGET = "over budget"  # a memory fix whose peak passed the budget


BUSY_REASON = "the machine was busy"  # how a BUSY verdict's reason begins


@dataclass(frozen=True)
class Verdict:
    """A candidate's verification: its paired speedups, what they support and why."""

    name: str
    ratios: tuple[float, ...]
    speedup: float  # geometric mean of the paired ratios
    low: float
    high: float
    status: Status
    reason: str
    confidence: float = PLAIN_LEVEL  # the level the interval was drawn at
    numerics: Optional[NumericsResult] = None
    peak_memory_mb: float = 0.0
    failures: tuple[str, ...] = ()  # reasons of the candidate's failed verification runs

    @property
    def verified(self) -> bool:
        return self.status is Status.VERIFIED

    @property
    def flaky(self) -> bool:
        return bool(self.failures)

    def to_dict(self) -> dict:
        return {**asdict(self), "status": self.status.value, "verified": self.verified}


def judge(
    name: str,
    ratios: Sequence[float],
    min_speedup: float,
    numerics: Optional[NumericsResult] = None,
    memory_fix: bool = False,
    peaks_mb: Sequence[float] = (),
    max_memory_mb: Optional[float] = None,
    failures: Sequence[str] = (),
    pairs: Optional[int] = None,
    confidence: float = PLAIN_LEVEL,
    disturbed: tuple[int, float] = (0, 0.0),
    set_aside: tuple[int, float] = (0, 0.0),
) -> Verdict:
    """The verdict on one candidate from its paired ratios, its interval drawn at `confidence`.

    `failures` are the reasons of the candidate's runs that crashed, hung or broke the budget:
    any one makes it flaky, never verified. `pairs` is how many successful pairs a verdict
    needs (default: as many as there are ratios); fewer, when the baseline failed, verify nothing.
    `disturbed`: the rounds in which other processes took BUSY_SHARE or more of the CPU, and the
    most they took (`Rounds.disturbed`). Such a load lands on one run of a pair more than the
    other: one such verification claimed 13.7x for a plan that re-measured at 1.9x on a quiet
    machine. A speedup measured so is shown, never verified. `set_aside`: such rounds already
    taken out of `ratios` (`Rounds.quiet`), and the most other processes took in them: the
    verdict stands on the quiet rounds, and says so; fewer than FIRST_LOOK quiet ones leave it
    unchecked.
    """
    speedup, low, high = paired_interval(ratios, confidence) if ratios else (0.0, 0.0, 0.0)
    peak = max(peaks_mb, default=0.0)
    runs = len(ratios) + len(failures) if pairs is None else pairs
    status, reason = _ruled_out(ratios, numerics, memory_fix, peak, max_memory_mb, failures, runs, disturbed, set_aside) \
        or _on_the_interval(low, high, min_speedup, confidence)
    if set_aside[0] and status is not Status.BUSY:
        reason += (f" ({len(ratios)} quiet rounds; {set_aside[0]} set aside and run again, in which other processes "
                   f"took up to {set_aside[1]:.0%} of the CPU)")
    return Verdict(name, tuple(ratios), speedup, low, high, status, reason, confidence, numerics, peak, tuple(failures))


def _on_the_interval(low: float, high: float, min_speedup: float, confidence: float) -> tuple[Status, str]:
    interval = f"{interval_words(confidence)} {low:.2f}x-{high:.2f}x"
    if low >= min_speedup:
        return Status.VERIFIED, f"{interval} clears {min_speedup:.2f}x"
    return Status.SHORT, f"{interval} does not clear {min_speedup:.2f}x"


def _ruled_out(ratios, numerics, memory_fix, peak, max_memory_mb, failures, runs, disturbed,
               set_aside) -> Optional[tuple[Status, str]]:
    """What decides a verdict before its interval does, in order; None when nothing does."""
    if failures:
        return Status.FLAKY, f"flaky: failed in {len(failures)} of {runs} runs: {failures[0]}"
    if set_aside[0] and len(ratios) < FIRST_LOOK:
        return Status.BUSY, (f"{BUSY_REASON}: other processes took up to {set_aside[1]:.0%} of its CPU in "
                             f"{set_aside[0]} rounds, set aside, and only {len(ratios)} quiet round(s) could be "
                             "had within the budget: unchecked; run it again on a quieter machine")
    if not ratios:
        return Status.NO_PAIRS, "no successful pair of runs"
    if len(ratios) < runs:
        return Status.NO_PAIRS, f"only {len(ratios)} of {runs} pairs succeeded: the baseline failed in the others"
    if numerics is not None and not numerics.passed:
        return Status.NUMERICS, f"numerics: {numerics.note}"
    if numerics is not None and numerics.risk == "changes semantics":
        return Status.SEMANTICS, "changes what is computed: shown as advice, never verified automatically"
    if memory_fix:
        if max_memory_mb is not None and peak <= max_memory_mb:
            return Status.VERIFIED, f"every run stayed under the {max_memory_mb:,.0f} MB budget (peak {peak:,.0f} MB)"
        return Status.OVER_BUDGET, f"peak {peak:,.0f} MB is over the {max_memory_mb or 0:,.0f} MB budget"
    if disturbed[0]:
        return Status.BUSY, (f"{BUSY_REASON}: other processes took up to {disturbed[1]:.0%} of its CPU "
                             f"in {disturbed[0]} of {len(ratios)} rounds, which distorts the ratios; "
                             "run it again on a quiet machine")
    return None


def levels_of(recs: list[dict]) -> str:
    """The level(s) a session's intervals were drawn at (a payload from before levels were kept: the plain one)."""
    return level_words(rec.get("confidence", PLAIN_LEVEL) for rec in recs)


def was_busy(rec: dict) -> bool:
    """Whether other processes decided a verdict (its status; the reason, in a payload from before statuses)."""
    return rec.get("status") == Status.BUSY.value if "status" in rec else rec.get("reason", "").startswith(BUSY_REASON)


def astride(status: str, high: float, bar: float) -> bool:
    """Whether a verdict is not settled: short of the bar with its interval reaching it, so more
    rounds could still verify it (one wholly under the bar is an answer)."""
    return status == Status.SHORT.value and high >= bar
