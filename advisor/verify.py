"""Verification's measurements: interleaved rounds against the reference, what a speedup is a
ratio of, and whether a candidate's results are unchanged (numerics).

Timings on a shared machine drift by tens of percent within minutes, so a candidate is never
compared with a baseline measured at another time. Each round measures the baseline and every
candidate back to back (order rotated between rounds); the ratio is taken within the round, so
drift common to the round cancels. What the ratios support, and at what level, is decided in
`advisor.verdict`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

from advisor.measure import BUSY_SHARE, Measurement
from advisor.outputs import own_output

EXACT_RTOL = 1e-3  # an "exact" recipe reorders float sums at most (threads, workers)


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
        return Rounds(self.baseline + more.baseline,  # an arm that ran only in the first rounds takes no more
                      {name: runs + (more.candidates[name] if len(runs) == len(self.baseline) else [])
                       for name, runs in self.candidates.items()})

    def ratios(self, name: str, basis: str = OBJECTIVE) -> list[float]:
        """The candidate's figure over the baseline's, round by round (`BASES` names the figures)."""
        figure = BASES[basis]
        return [
            figure(c) / figure(b)
            for b, c in zip(self.baseline, self.candidates[name])
            if b.ok and c.ok and figure(b) > 0
        ]

    def disturbance(self, index: int) -> float:
        """The most of the machine's CPU other processes took during any successful run of a round
        (an arm that ran only in the first rounds, `interleave`'s `first_rounds_only`, where it ran)."""
        index %= len(self.baseline)
        runs = [self.baseline[index], *(runs[index] for runs in self.candidates.values() if index < len(runs))]
        return max((run.other_cpu_share for run in runs if run.ok), default=0.0)

    def quiet(self) -> "Rounds":
        """These rounds without those in which other processes took BUSY_SHARE or more of the CPU."""
        kept = [index for index in range(len(self.baseline)) if self.disturbance(index) < BUSY_SHARE]
        return Rounds([self.baseline[i] for i in kept],
                      {name: [runs[i] for i in kept if i < len(runs)] for name, runs in self.candidates.items()})

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


def arms_in_round(names: Sequence[str], round_index: int, first_rounds_only: Optional[dict[str, int]] = None,
                  later_rounds_only: Optional[dict[str, int]] = None) -> list[str]:
    """The arms that run in a round (0-based), in order: all but those of `first_rounds_only`
    past their first rounds, and those of `later_rounds_only` before the round they join."""
    limits, joins = first_rounds_only or {}, later_rounds_only or {}
    return [name for name in names if joins.get(name, 0) <= round_index < limits.get(name, round_index + 1)]


NOT_RUN = "not run: the arm joins later rounds"


def not_run(plan: dict) -> Measurement:
    """What stands in an arm's place in the rounds before it joins (`interleave`'s
    `later_rounds_only`), so that its runs line up with the reference's rounds: a failed run,
    which no ratio reads."""
    return Measurement.failed("not run", plan, NOT_RUN)


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
    first_rounds_only: Optional[dict[str, int]] = None,
    earlier_said: str = "kept from before",
    later_rounds_only: Optional[dict[str, int]] = None,
) -> Rounds:
    """Runs `pairs` rounds; in each, the reference plan (named `reference` in the progress lines)
    and every candidate, order rotated per round. `first_reference_run`, a run of the reference
    made just before, stands in for the first round's (it leads that round's order anyway).
    `measure_reference` measures the reference where it differs from the candidates' `measure`
    (the job as the user runs it today, without the memory budget the candidates must keep).
    `enough`, asked after each round with the rounds so far, stops them early when it says so.
    `earlier`: these arms' rounds run before (a session stopped mid-verification, or other
    rounds that ran these plans: `earlier_said` says which), counted among the `pairs` and not
    run again; `keep` hears each round as it finishes, to store it.
    `first_rounds_only`: arms that run in that many first rounds only (the ideal: a ceiling, not
    a claim); their runs pair with the reference's first rounds. `later_rounds_only`: arms that
    join at that round (0-based); before it, `not_run` stands in their place."""
    names = [reference, *candidates]
    plans = {reference: baseline_plan, **candidates}
    runs: dict[str, list[Measurement]] = {name: [] for name in names}
    if earlier is not None and earlier.baseline:
        runs = {reference: list(earlier.baseline), **{name: list(earlier.candidates[name]) for name in candidates}}
        done = len(earlier.baseline)
        if pairs <= done or enough(_rounds(runs, reference)):
            progress(f"  {done} round(s) {earlier_said}: no more are needed")
            return _rounds(runs, reference)
        progress(f"  {done} round(s) {earlier_said}: going on from round {rounds_before + done + 1}")
        rounds_before, pairs = rounds_before + done, pairs - done
    for round_index in range(rounds_before, rounds_before + pairs):  # continuing earlier rounds keeps the rotation
        present = arms_in_round(names, round_index, first_rounds_only, later_rounds_only)
        waiting = [name for name in names if round_index < (later_rounds_only or {}).get(name, 0)]
        shift = round_index % len(present)
        for name in present[shift:] + present[:shift]:
            given = round_index == 0 and name == reference and first_reference_run is not None
            how = measure_reference if name == reference and measure_reference else measure
            runs[name].append(first_reference_run if given else how(plans[name]))
        for name in waiting:
            runs[name].append(not_run(plans[name]))
        total = rounds_total(round_index + 1) if callable(rounds_total) else rounds_total or rounds_before + pairs
        label = f"{round_index + 1}/{total}"
        other = _rounds(runs, reference).disturbance(-1)
        busy = f"; set aside: other processes took {other:.0%} of the CPU" if other >= BUSY_SHARE else ""
        keep(round_index, {name: runs[name][-1] for name in present + waiting})  # before it is said: a round said is kept
        progress(f"  round {label}: " + ", ".join(_round_summary(runs, name) for name in present) + busy)
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
