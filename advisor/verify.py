"""Verification: interleaved re-measurement against the baseline, paired ratios, a Student-t interval.

Timings on a shared machine drift by tens of percent within minutes, so a candidate is never
compared with a baseline measured at another time. Each round measures the baseline and every
candidate back to back (order rotated between rounds); the ratio is taken within the round, so
drift common to the round cancels. A fix is verified only when the lower end of the 95%
interval of its speedup clears `min_speedup` (or, for a memory fix, when every run stays
under the budget) and its numerics match the baseline's.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence, Union

from advisor.measure import BUSY_SHARE, Measurement
from advisor.outputs import own_output

EXACT_RTOL = 1e-3  # an "exact" recipe reorders float sums at most (threads, workers)
FIRST_LOOK = 3  # rounds after which a verification may stop, when every verdict is already settled
BUSY_REASON = "the machine was busy"  # a verdict's reason when other processes disturbed its rounds
# Pocock's constant boundaries for 1 to 6 looks at a two-sided 5% (Pocock 1977, Biometrika 64:191):
# every look's interval is drawn at the same level, wide enough that all looks together miss the
# truth at most 5% of the time (`python -m experiments.calibrate --coverage` measures ours).
POCOCK = (1.960, 2.178, 2.289, 2.361, 2.413, 2.453)
LOOK_GROWTH = 1.6  # each look past search.pairs has this many times the rounds of the one before


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
    for the looks taken so far, a plain 95% at the first; otherwise (the schedule's end, or its
    time budget) the whole schedule's. Stopping at a settled look, the narrower interval says
    the same verdict; a verification that stops at its first look is not widened for looks it
    never took. `python -m experiments.calibrate --coverage` measures the coverage."""
    looks = sum(look <= rounds for look in schedule)
    return look_confidence(max(1, looks) if settled_there else len(schedule))


@dataclass(frozen=True)
class NumericsResult:
    passed: bool
    risk: str
    max_rel_diff: float
    rtol: float
    steps: int
    note: str = ""


FLOAT32_ROUNDOFF = 2.0 ** -24  # float32's unit roundoff: the size of the envelope's nudge
AMPLIFIED = 100  # growth of a one-ulp nudge within the timed steps past which a job amplifies rounding
ENVELOPE_MULTIPLE = 3.0  # on such a job, a tolerance widens by this many times the nudge's growth


@dataclass(frozen=True)
class Envelope:
    """How far rounding alone moves a training job: the baseline run again with every weight
    nudged by one unit in the last place, against the baseline. Per timed step, the largest
    relative loss difference so far, and the largest relative difference of the parameters'
    checksums at the end.

    A job amplifies rounding (chaos: a large learning rate, clipping, recurrence) when the
    nudge's difference grows AMPLIFIED-fold over the timed steps. There, any change of rounding
    (another kernel's summation order, a coarser precision) is amplified alike, and a fixed
    tolerance rejects every fix. So on such a job a step's tolerance is the fixed one times
    ENVELOPE_MULTIPLE times the growth by that step: the first steps, before anything grows,
    keep the fixed tolerance, which is where a changed computation (another learning rate)
    shows. A job whose loss is merely sensitive to its weights (an answer in the low bits) does
    not grow the nudge: its tolerances stay fixed, and a coarser precision is judged by them."""

    losses: tuple[float, ...]
    parameters: float

    def growth(self, step: int) -> float:
        """How many times the nudge's loss difference has grown by a timed step, from its first."""
        start = max(self.losses[0], FLOAT32_ROUNDOFF)
        return self.losses[min(step, len(self.losses) - 1)] / start

    @property
    def amplifies(self) -> bool:
        return bool(self.losses) and self.growth(len(self.losses) - 1) >= AMPLIFIED

    def loss_tolerance(self, step: int, floor: float) -> float:
        return floor * max(1.0, ENVELOPE_MULTIPLE * self.growth(step)) if self.amplifies else floor

    def parameter_tolerance(self, floor: float) -> float:
        """The parameters' tolerance: on a chaotic job, widened by the nudge's growth there."""
        growth = self.parameters / FLOAT32_ROUNDOFF
        return floor * max(1.0, ENVELOPE_MULTIPLE * growth) if self.amplifies else floor

    def summary(self) -> dict:
        """What the results folder and MLflow keep of it."""
        last = len(self.losses) - 1
        return {"amplifies": self.amplifies, "max_loss_difference": max(self.losses, default=0.0),
                "growth": self.growth(last) if self.losses else 0.0, "parameters_difference": self.parameters,
                "multiple": ENVELOPE_MULTIPLE, "sentence": self.describe()}

    def describe(self) -> str:
        worst = max(self.losses, default=0.0)
        step = self.losses.index(worst) + 1 if self.losses else 0
        if not self.amplifies:
            return (f"rounding alone (every weight nudged by one unit in the last place) moves the loss {worst:.1e} "
                    "at most and does not grow: candidates were judged against the fixed tolerances")
        return (f"this job amplifies rounding: every weight nudged by one unit in the last place moves the loss "
                f"{worst:.2%} by step {step}, {self.growth(step - 1):,.0f} times its first difference; each step's "
                f"tolerance was widened {ENVELOPE_MULTIPLE:g}x that growth (the first steps keep the fixed tolerance)")


def envelope_of(nudged: Measurement, baseline: Measurement) -> Optional[Envelope]:
    """The envelope from a nudged run of the baseline and the baseline's own run (None when
    either has no losses to compare)."""
    steps = min(len(nudged.losses), len(baseline.losses))
    if not nudged.ok or not baseline.ok or steps == 0:
        return None
    drift, worst = [], 0.0
    for mine, theirs in zip(nudged.losses[:steps], baseline.losses[:steps]):
        worst = max(worst, abs(mine - theirs) / max(abs(theirs), 1e-12))
        drift.append(worst)
    pairs = [(a, b) for m, t in zip(nudged.parameters, baseline.parameters) for a, b in zip(m, t)]
    parameters = max((abs(a - b) / max(abs(b), 1e-12) for a, b in pairs), default=0.0)
    return Envelope(tuple(drift), parameters)


@dataclass(frozen=True)
class Verdict:
    """A candidate's verification: its paired speedups and what they support."""

    name: str
    ratios: tuple[float, ...]
    speedup: float  # geometric mean of the paired ratios
    low: float
    high: float
    verified: bool
    reason: str
    numerics: Optional[NumericsResult] = None
    peak_memory_mb: float = 0.0
    failures: tuple[str, ...] = ()  # reasons of the candidate's failed verification runs

    @property
    def flaky(self) -> bool:
        return bool(self.failures)

    def to_dict(self) -> dict:
        return asdict(self)


def paired_interval(ratios: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Geometric-mean speedup and its Student-t interval, from paired ratios.

    The interval is the t interval on the mean log-ratio. Chosen on evidence
    (`python -m experiments.calibrate --coverage`): at 3 to 8 pairs it covers the true speedup
    at its nominal level for normal noise and within about a point for heavy-tailed noise,
    where the percentile bootstrap this replaced covered 78-91% at a nominal 95%.
    """
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    center = statistics.fmean(logs) if logs else 0.0
    if n < 2:
        return math.exp(center), 0.0, math.inf
    half = t_quantile(0.5 + confidence / 2, n - 1) * statistics.stdev(logs) / math.sqrt(n)
    return math.exp(center), math.exp(center - half), math.exp(center + half)


@functools.lru_cache(maxsize=None)
def t_quantile(probability: float, dof: int) -> float:
    """Student's t quantile for a whole number of degrees of freedom, by bisection on its exact
    distribution function (importing scipy.stats for it cost a second at the first verdict)."""
    if not 0.0 < probability < 1.0 or dof < 1:
        raise ValueError(f"t_quantile needs 0 < probability < 1 and dof >= 1, got {probability}, {dof}")
    if probability < 0.5:
        return -t_quantile(1.0 - probability, dof)
    low, high = 0.0, 1.0
    while t_cdf(high, dof) < probability:
        high *= 2.0
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if t_cdf(middle, dof) < probability else (low, middle)
    return (low + high) / 2


def t_cdf(value: float, dof: int) -> float:
    """P(T <= value) for Student's t with `dof` (a whole number) degrees of freedom: the finite
    series in the angle atan(value / sqrt(dof)) (Abramowitz and Stegun, 26.7.3 and 26.7.4)."""
    theta = math.atan(value / math.sqrt(dof))
    cos2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    if dof % 2 == 0:  # sin(theta) (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... up to cos^(dof-2))
        for k in range(1, dof // 2):
            term *= cos2 * (2 * k - 1) / (2 * k)
            total += term
        within = math.sin(theta) * total
    else:  # 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ... up to cos^(dof-3)))
        for k in range(1, (dof - 1) // 2):
            term *= cos2 * (2 * k) / (2 * k + 1)
            total += term
        within = 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total if dof > 1 else 0.0))
    return 0.5 + within / 2  # `within` is P(|T| <= |value|), signed with value


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
    confidence: float = 0.95,
    disturbed: tuple[int, float] = (0, 0.0),
    set_aside: tuple[int, float] = (0, 0.0),
) -> Verdict:
    """The verdict on one candidate from its paired ratios; a pure function.

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
    if failures:
        verified, reason = False, f"flaky: failed in {len(failures)} of {runs} runs: {failures[0]}"
    elif set_aside[0] and len(ratios) < FIRST_LOOK:
        verified, reason = False, (f"{BUSY_REASON}: other processes took up to {set_aside[1]:.0%} of its CPU in "
                                   f"{set_aside[0]} rounds, set aside, and only {len(ratios)} quiet round(s) could be "
                                   "had within the budget: unchecked; run it again on a quieter machine")
    elif not ratios:
        verified, reason = False, "no successful pair of runs"
    elif pairs is not None and len(ratios) < pairs:
        verified, reason = False, f"only {len(ratios)} of {pairs} pairs succeeded: the baseline failed in the others"
    elif numerics is not None and not numerics.passed:
        verified, reason = False, f"numerics: {numerics.note}"
    elif numerics is not None and numerics.risk == "changes semantics":
        verified, reason = False, "changes what is computed: shown as advice, never verified automatically"
    elif memory_fix:
        under = max_memory_mb is not None and peak <= max_memory_mb
        verified = under
        reason = (
            f"every run stayed under the {max_memory_mb:,.0f} MB budget (peak {peak:,.0f} MB)"
            if under
            else f"peak {peak:,.0f} MB is over the {max_memory_mb or 0:,.0f} MB budget"
        )
    elif disturbed[0]:
        verified, reason = False, (f"{BUSY_REASON}: other processes took up to {disturbed[1]:.0%} of its CPU "
                                   f"in {disturbed[0]} of {len(ratios)} rounds, which distorts the ratios; "
                                   "run it again on a quiet machine")
    elif low >= min_speedup:
        verified, reason = True, f"95% interval {low:.2f}x-{high:.2f}x clears {min_speedup:.2f}x"
    else:
        verified, reason = False, f"95% interval {low:.2f}x-{high:.2f}x does not clear {min_speedup:.2f}x"
    if set_aside[0] and not reason.startswith(BUSY_REASON):
        reason += (f" ({len(ratios)} quiet rounds; {set_aside[0]} set aside and run again, in which other processes "
                   f"took up to {set_aside[1]:.0%} of the CPU)")
    return Verdict(name, tuple(ratios), speedup, low, high, verified, reason, numerics, peak, tuple(failures))


def settled(ratios: Sequence[float], min_speedup: float, failures: Sequence[str] = (),
            confidence: float = 0.95) -> bool:
    """Whether more rounds could not change a speed verdict: a failed run (flaky, whatever comes
    next), or an interval wholly above or wholly below `min_speedup`.

    A verification looks at the rounds of its `look_schedule` and stops at the first look where
    every verdict is settled. Several looks at the same candidate would let chance verify it
    more often than one, so every look uses Pocock's level for that many looks
    (`look_confidence`): all of them together cover at least 95%."""
    if failures:
        return True
    if len(ratios) < 2:
        return False
    _, low, high = paired_interval(ratios, confidence)
    return low >= min_speedup or high < min_speedup


def half_width(ratios: Sequence[float], confidence: float = 0.95) -> float:
    """How far the interval reaches either side of the speedup, as a share of it (the geometric
    half-width: 2.0x (1.8-2.2x) is about 0.1); infinite under two ratios."""
    _, low, high = paired_interval(ratios, confidence)
    return math.sqrt(high / low) - 1 if low > 0 and math.isfinite(high) else math.inf


def rounds_to_pin(claims: dict[str, Sequence[float]], min_speedup: float, precision: float,
                  confidence: float = 0.95) -> tuple[Optional[str], int]:
    """The candidate a user would adopt (the fastest whose interval clears `min_speedup`), and
    the rounds its interval says it needs to reach no further than `precision` either side of
    its speedup (a width shrinks as one over the root of the rounds); (None, 0) when none clears
    the bar or `precision` is 0 (off). A verdict settles as soon as the interval clears the bar,
    often after 3 rounds with an interval of +-20-40%: the number a user plans on, and
    re-measures, deserves the rounds that pin it down. The rounds are fixed once, from the
    rounds that settled the verdict: stopping whenever a later interval happened to look
    narrow would stop on rounds that agree by chance, and the intervals would cover less than
    they say (`python -m experiments.calibrate --coverage` measures it)."""
    if precision <= 0:
        return None, 0
    cleared = {name: paired_interval(ratios, confidence) for name, ratios in claims.items() if len(ratios) >= 2}
    cleared = {name: interval for name, interval in cleared.items() if interval[1] >= min_speedup}
    if not cleared:
        return None, 0
    best = max(cleared, key=lambda name: cleared[name][0])
    reach = math.log1p(half_width(claims[best], confidence))  # in logs, where a width shrinks as one over the root
    return best, math.ceil(len(claims[best]) * (reach / math.log1p(precision)) ** 2)


OBJECTIVE, ANSWERED = "objective", "answered"  # what a speedup is a ratio of (`BASES`)


def answered_rate(run: Measurement) -> float:
    """The most requests a service answers a second, every request queued at once (the harness's
    `full_load_rate`, measured after each open-load p95 replay; 0 for a run without it)."""
    return (run.latency or {}).get("full_load_per_s", 0.0)


BASES: dict[str, Callable[[Measurement], float]] = {
    OBJECTIVE: lambda run: run.samples_per_s,  # the config's objective
    ANSWERED: answered_rate,  # a p95 objective whose baseline is near its limit (`speedup_basis`)
}


NEAR_LIMIT = 0.75  # offered at this share of what a service answers at full load or more, its p95 is mostly queueing


def near_its_limit(run: Measurement) -> bool:
    """Whether an open-load run's service fell behind (`capacity.saturated`) or was offered
    NEAR_LIMIT or more of what it answers at full load. There its p95 is mostly time spent
    queueing, which moves about 1 / (1 - share) times as much as the service's own pace (4x at
    0.75): the host's pace from one minute to the next swings it (one reference read its
    baseline's 1000 / p95 from 2/s to 161/s across rounds), and past the limit it measures how
    long the replay ran (twice the requests, about twice the p95)."""
    latency = run.latency or {}
    if latency.get("saturated"):
        return True
    offered, most = latency.get("rate_per_s"), latency.get("full_load_per_s")
    return bool(offered and most and offered >= NEAR_LIMIT * most)


def speedup_basis(objective: str, open_load: bool, baseline_runs: Sequence[Measurement]) -> str:
    """What a service's speedups are ratios of. Under open load, a baseline `near_its_limit` has a
    p95 that no later hour reproduces, and what it answered a second at the rate offered is its
    limit while a plan that keeps up answers about every arrival, so a ratio of those follows how
    fast the baseline ran that hour too. When it was near its limit in half its runs or more, a
    p95 objective's speedups are of the most requests each plan answers a second, every request
    queued at once (`answered_rate`), a figure that scales with the host's pace as every plan's
    does: ANSWERED; else the objective's own: OBJECTIVE."""
    good = [run for run in baseline_runs if run.ok and run.latency]
    if objective != "p95" or not open_load or not good:
        return OBJECTIVE
    return ANSWERED if 2 * sum(near_its_limit(run) for run in good) >= len(good) else OBJECTIVE


@dataclass(frozen=True)
class Rounds:
    """The runs of an interleaved verification: per round, the baseline and each candidate."""

    baseline: list[Measurement]
    candidates: dict[str, list[Measurement]]

    def then(self, more: "Rounds") -> "Rounds":
        """These rounds followed by `more`."""
        return Rounds(self.baseline + more.baseline,
                      {name: runs + more.candidates[name] for name, runs in self.candidates.items()})

    def ratios(self, name: str, basis: str = OBJECTIVE) -> list[float]:
        """The candidate's figure over the baseline's, round by round (`BASES` names the figures)."""
        figure = BASES[basis]
        return [
            figure(c) / figure(b)
            for b, c in zip(self.baseline, self.candidates[name])
            if b.ok and c.ok and figure(b) > 0
        ]

    def disturbance(self, index: int) -> float:
        """The most of the machine's CPU other processes took during any successful run of a round."""
        runs = [self.baseline[index], *(runs[index] for runs in self.candidates.values())]
        return max((run.other_cpu_share for run in runs if run.ok), default=0.0)

    def quiet(self) -> "Rounds":
        """These rounds without those in which other processes took BUSY_SHARE or more of the CPU."""
        kept = [index for index in range(len(self.baseline)) if self.disturbance(index) < BUSY_SHARE]
        return Rounds([self.baseline[i] for i in kept], {name: [runs[i] for i in kept] for name, runs in self.candidates.items()})

    def set_aside(self) -> tuple[int, float]:
        """How many rounds `quiet` leaves out, and the most other processes took in them."""
        shares = [self.disturbance(index) for index in range(len(self.baseline))]
        busy = [share for share in shares if share >= BUSY_SHARE]
        return len(busy), max(busy, default=0.0)

    def disturbed(self, name: str) -> tuple[int, float]:
        """The rounds in which other processes took BUSY_SHARE or more of the machine's CPU during
        the baseline's run or the candidate's, and the most they took in any round."""
        shares = [max(b.other_cpu_share, c.other_cpu_share)
                  for b, c in zip(self.baseline, self.candidates[name]) if b.ok and c.ok]
        return sum(share >= BUSY_SHARE for share in shares), max(shares, default=0.0)

    def failures(self, name: str) -> list[str]:
        """Why the candidate's failed runs failed, in order: each counts against it."""
        return [run.reason or "failed" for run in self.candidates[name] if not run.ok]


def interleave(
    baseline_plan: dict,
    candidates: dict[str, dict],
    measure: Callable[[dict], Measurement],
    pairs: int,
    progress: Callable[[str], None] = lambda line: None,
    reference: str = "baseline",
    first_reference_run: Optional[Measurement] = None,
    rounds_before: int = 0,
    rounds_total: Union[int, Callable[[int], int], None] = None,
    measure_reference: Optional[Callable[[dict], Measurement]] = None,
    enough: Callable[["Rounds"], bool] = lambda rounds: False,
    earlier: Optional[Rounds] = None,
    keep: Callable[[int, dict[str, Measurement]], None] = lambda index, runs: None,
) -> Rounds:
    """Runs `pairs` rounds; in each, the reference plan (named `reference` in the progress lines)
    and every candidate, order rotated per round. `first_reference_run`, a run of the reference
    made just before, stands in for the first round's (it leads that round's order anyway).
    `measure_reference` measures the reference where it differs from the candidates' `measure`
    (the job as the user runs it today, without the memory budget the candidates must keep).
    `enough`, asked after each round with the rounds so far, stops them early when it says so.
    `earlier`: these arms' rounds finished before (a session stopped mid-verification), counted
    among the `pairs` and not run again; `keep` hears each round as it finishes, to store it."""
    names = [reference, *candidates]
    plans = {reference: baseline_plan, **candidates}
    runs: dict[str, list[Measurement]] = {name: [] for name in names}
    if earlier is not None and earlier.baseline:
        runs = {reference: list(earlier.baseline), **{name: list(earlier.candidates[name]) for name in candidates}}
        done = len(earlier.baseline)
        progress(f"  {done} round(s) kept from before: going on from round {rounds_before + done + 1}")
        rounds_before, pairs = rounds_before + done, pairs - done
        if pairs <= 0 or enough(_rounds(runs, reference)):
            return _rounds(runs, reference)
    for round_index in range(rounds_before, rounds_before + pairs):  # continuing earlier rounds keeps the rotation
        shift = round_index % len(names)
        order = names[shift:] + names[:shift]
        for name in order:
            given = round_index == 0 and name == reference and first_reference_run is not None
            how = measure_reference if name == reference and measure_reference else measure
            runs[name].append(first_reference_run if given else how(plans[name]))
        total = rounds_total(round_index + 1) if callable(rounds_total) else rounds_total or rounds_before + pairs
        label = f"{round_index + 1}/{total}"
        other = _rounds(runs, reference).disturbance(-1)
        busy = f"; set aside: other processes took {other:.0%} of the CPU" if other >= BUSY_SHARE else ""
        keep(round_index, {name: runs[name][-1] for name in names})  # before it is said: a round said is kept
        progress(f"  round {label}: " + ", ".join(_round_summary(runs, name) for name in names) + busy)
        if enough(_rounds(runs, reference)):
            break
    return _rounds(runs, reference)


def _rounds(runs: dict[str, list[Measurement]], reference: str) -> Rounds:
    return Rounds(list(runs[reference]), {name: list(r) for name, r in runs.items() if name != reference})


def _round_summary(runs: dict[str, list[Measurement]], name: str) -> str:
    run = runs[name][-1]
    value = f"{run.samples_per_s:,.0f}/s" if run.ok else "failed"
    if run.ok and run.latency.get("saturated"):  # its p95 is the replay's length: what it answered says more
        value += f" (saturated: answers {run.latency['served_per_s']:,.0f}/s)"
    if run.ok and answered_rate(run):
        value += f" [{answered_rate(run):,.0f}/s at full load]"
    return f"{name} {value}"


def step_breakdown(runs: Sequence[Measurement]) -> dict:
    """Mean step time split into data wait, host-to-device copy and compute, over successful runs."""
    good = [r for r in runs if r.ok]
    if not good:
        return {}
    step = statistics.fmean(r.step_ms_mean for r in good)
    wait = statistics.fmean(r.data_wait_share * r.step_ms_mean for r in good)
    copy = statistics.fmean(r.transfer_share * r.step_ms_mean for r in good)
    return {"data wait": wait, "transfer": copy, "compute": max(0.0, step - wait - copy)}


def foreign_output(config, candidate: Measurement, reference: Measurement, risk: str,
                   tolerance: float) -> Optional[NumericsResult]:
    """A failed comparison when either kept output lies outside advisor's own folder (never read); else None."""
    if all(own_output(config, run.output.get("path")) for run in (candidate, reference)):
        return None
    return NumericsResult(False, risk, math.inf, tolerance, 0, "an output lies outside advisor's own folder: not read")


def first_non_finite(losses: Sequence[float]) -> Optional[int]:
    """The index of the first NaN or infinite loss, or None."""
    return next((index for index, loss in enumerate(losses) if not math.isfinite(loss)), None)
