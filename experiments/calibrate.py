"""The verifier's calibration: does its interval cover what it says, and does it call nothing fast?

    python -m experiments.calibrate --coverage [--sets 4000]
    python -m experiments.calibrate --precision [--sets 4000]
    python -m experiments.calibrate [configs/prep_stall.yaml] [--repeats 20] [--pairs 5]

`--coverage` simulates paired log-ratios with a known true speedup, at 3, 5 and 8 pairs, under
normal noise and heavy-tailed noise, and runs each set through the verifier's own interval
(`advisor.verify.paired_interval`). One line per case: the nominal level, n, the noise, the
measured coverage, and how often the lower end lands above the truth (a false claim of speed).

`--precision` simulates, under the same stopping rule, how far a verified claim's number lies
from the truth and from a replay of it (as many rounds as the claim took, 5 at least), at
per-round noise of 0.05 to 0.3, with the rule stopping at the verdict and with the default
`search.precision`: what a bound on reproduction can ask of claims at a given noise.

Without `--coverage`, the live A/A check: the baseline plan verified against itself, as
`advisor optimize` verifies (fresh interleaved child runs under the sequential rule, paired
ratios, the interval), and counted when its lower end clears 1.0, that is, when a plan that
does nothing is called faster. At 95% about 1 in 40 is expected.
"""

from __future__ import annotations

import argparse
import functools
import math
import random
import statistics
from dataclasses import dataclass
from typing import Callable

from advisor.config import SearchConfig
from advisor.verdict import (
    FIRST_LOOK,
    FUTILE_UNDER,
    Verdict,
    chance_to_settle,
    judge,
    level_stopping_at,
    look_confidence,
    look_schedule,
    paired_interval,
    reported_confidence,
    rounds_to_pin,
    settled,
)
from advisor.verify import interleave

TRUE_SPEEDUP = 1.5
NOISE_SD = 0.1  # per-pair log-ratio spread; single pairs on the 2-core machine span 1.3x-2.6x at worst
OUTLIER_SHARE = 0.10  # pairs in which one run was disturbed ...
OUTLIER = math.log(1.3)  # ... by 30%
PAIRS = (3, 5, 8)
LEVELS = (0.95, 0.99)


def _normal(rng: random.Random) -> float:
    return rng.gauss(0.0, NOISE_SD)


def _student_t3(rng: random.Random) -> float:
    """Student-t with 3 degrees of freedom, scaled to NOISE_SD (its variance is 3)."""
    chi2 = sum(rng.gauss(0.0, 1.0) ** 2 for _ in range(3))
    return NOISE_SD * rng.gauss(0.0, 1.0) / math.sqrt(chi2 / 3) / math.sqrt(3)


def _outliers(rng: random.Random) -> float:
    """Normal noise; in 10% of pairs one of the two runs is 30% slow (either plan's)."""
    hit = rng.random() < OUTLIER_SHARE
    return rng.gauss(0.0, NOISE_SD) + (rng.choice((-1, 1)) * OUTLIER if hit else 0.0)


def _skewed(rng: random.Random) -> float:
    """Normal noise; in 10% of pairs the candidate alone is 30% slow (centred: the truth is the mean)."""
    hit = rng.random() < OUTLIER_SHARE
    return rng.gauss(0.0, NOISE_SD) - (OUTLIER if hit else 0.0) + OUTLIER_SHARE * OUTLIER


NOISES: dict[str, Callable[[random.Random], float]] = {
    "normal": _normal,
    "student-t3": _student_t3,
    "outliers": _outliers,
    "skewed": _skewed,
}


@dataclass(frozen=True)
class Coverage:
    level: float
    pairs: int
    noise: str
    covered: float  # share of intervals that contain the true speedup
    low_above: float  # share whose lower end lies above it: speed claimed that is not there

    def line(self) -> str:
        return (f"coverage {self.level:.0%} n={self.pairs} {self.noise}: {self.covered:.3f}"
                f"  (lower end above the truth: {self.low_above:.3f})")


def coverage(level: float, pairs: int, noise: str, sets: int, seed: int = 0) -> Coverage:
    """Simulates `sets` verifications of `pairs` paired ratios around TRUE_SPEEDUP."""
    rng = random.Random(f"{seed}-{level}-{pairs}-{noise}")
    draw = NOISES[noise]
    covered = above = 0
    for _ in range(sets):
        ratios = [TRUE_SPEEDUP * math.exp(draw(rng)) for _ in range(pairs)]
        _, low, high = paired_interval(ratios, level)
        covered += low <= TRUE_SPEEDUP <= high
        above += low > TRUE_SPEEDUP
    return Coverage(level, pairs, noise, covered / sets, above / sets)


def coverage_table(sets: int, seed: int = 0) -> list[Coverage]:
    return [coverage(level, n, noise, sets, seed) for level in LEVELS for n in PAIRS for noise in NOISES]


@dataclass(frozen=True)
class Sequential:
    noise: str
    truth: float
    covered: float  # share of final intervals that contain the truth
    verified: float  # share called verified: at a truth equal to the bar, a false claim
    stopped_early: float  # share settled after FIRST_LOOK rounds
    mean_rounds: float  # rounds run, on average
    schedule: tuple[int, ...]

    def line(self) -> str:
        return (f"sequential looks {'/'.join(map(str, self.schedule))}, {self.noise}, truth {self.truth}x, bar {BAR}x: "
                f"covered {self.covered:.3f}, verified {self.verified:.3f}, stopped at {FIRST_LOOK}: "
                f"{self.stopped_early:.3f}, mean rounds {self.mean_rounds:.1f}")


BAR = 1.05


PRECISION = SearchConfig().precision  # the verifier's default search.precision


def rounds_until_settled(draw: Callable[[], float], schedule: tuple[int, ...], deciding: float,
                         precision: float = PRECISION, pairs: int = 5, futile_under: float = FUTILE_UNDER) -> list[float]:
    """The verifier's stopping rule over drawn ratios (`Stopping`, without its time budget):
    rounds up to each look of `schedule`, stopping at the first look where the verdict is
    settled at the `deciding` level and, where it is verified, has the rounds `rounds_to_pin`
    asked at the first settled look to pin it to `precision` (or at those rounds themselves,
    between looks, where it is still settled there); or, from `pairs` rounds on, where
    it is not settled and its chance to settle by the schedule's end is under `futile_under`
    (`chance_to_settle`; 0: never)."""
    ratios: list[float] = []
    pinned = None
    for look in schedule:
        if pinned is not None and len(ratios) < pinned < look:  # a stop of its own, before this look
            ratios += [draw() for _ in range(pinned - len(ratios))]
            if settled(ratios, BAR, confidence=deciding):
                break
        ratios += [draw() for _ in range(look - len(ratios))]
        if not settled(ratios, BAR, confidence=deciding):
            if pairs <= look < schedule[-1] and chance_to_settle(ratios, BAR, schedule[-1], deciding) < futile_under:
                break
            continue
        if pinned is None:
            pinned = rounds_to_pin({"#1": ratios}, BAR, precision, functools.partial(level_stopping_at, schedule))[1]
        if len(ratios) >= pinned:
            break
    return ratios


def sequential_coverage(noise: str, truth: float, sets: int, pairs: int = 5, most: int = 12, seed: int = 0,
                        precision: float = PRECISION, futile_under: float = FUTILE_UNDER) -> Sequential:
    """Simulates the verifier's own stopping rule (`advisor.session.verification._interleaved`):
    a look after each round count of `look_schedule(pairs, most)`, stopped at the first where the
    verdict is settled at Pocock's level for the whole schedule, and the interval then drawn at
    `reported_confidence`. The final interval must cover the truth 93.5-96.5% of the time (at a
    nominal 95%)."""
    rng = random.Random(f"sequential-{seed}-{noise}-{truth}")
    draw = NOISES[noise]
    schedule = look_schedule(pairs, most)
    deciding = look_confidence(len(schedule))
    covered = verified = early = rounds = 0
    for _ in range(sets):
        ratios = rounds_until_settled(lambda: truth * math.exp(draw(rng)), schedule, deciding, precision, pairs, futile_under)
        early += len(ratios) == FIRST_LOOK
        rounds += len(ratios)
        stopped_settled = settled(ratios, BAR, confidence=deciding)
        _, low, high = paired_interval(ratios, reported_confidence(schedule, len(ratios), stopped_settled))
        covered += low <= truth <= high
        verified += low >= BAR
    return Sequential(noise, truth, covered / sets, verified / sets, early / sets, rounds / sets, schedule)


@dataclass(frozen=True)
class Precision:
    truth: float
    spread: float  # per-round log-ratio sd
    precision: float  # search.precision: the interval's reach, either side, a verified claim is measured to
    bias: float  # the claims that verified, against the truth (geometric mean of claimed / truth, less 1)
    error: float  # their mean absolute distance from the truth
    replay_error: float  # mean absolute distance of a replay from the claim
    replay_over: float  # share of replays off the claim by more than 10% (issue 31's worst)
    mean_rounds: float  # the claims' rounds, on average
    replay_rounds: float  # the replays' rounds, on average

    def line(self) -> str:
        return (f"truth {self.truth}x, per-round sd {self.spread}, search.precision {self.precision}: claims verified "
                f"after {self.mean_rounds:.1f} rounds on average are off the truth by {self.error:.1%} (bias "
                f"{self.bias:+.1%}); a replay of {self.replay_rounds:.1f} rounds is off the claim by "
                f"{self.replay_error:.1%} on average, by over 10% in {self.replay_over:.0%}")


REPLAY_ROUNDS = 5  # the fewest rounds a replay takes; one of a claim measured longer takes as many as it did


def claim_precision(truth: float, spread: float, sets: int, pairs: int = 5, most: int = 12, seed: int = 0,
                    precision: float = PRECISION, replay_rounds: int = 0) -> Precision:
    """How far a verified claim's number lies from the truth, and from a replay of it (of
    `replay_rounds`, or as many as the claim took and REPLAY_ROUNDS at least, as the benchmark
    suite replays), under the verifier's stopping rule with normal per-round noise of sd
    `spread`: what a reproduction bound can ask of claims at a given noise. Without
    `precision`, the rule stops as soon as the verdict is clear, so a claim rests on 3 rounds
    where it is far above the bar, and one near the bar is read at the look where chance lifted
    it over (the bias); with it, a verified claim takes rounds until its interval is that narrow."""
    rng = random.Random(f"precision-{seed}-{truth}-{spread}")
    schedule = look_schedule(pairs, most)
    deciding = look_confidence(len(schedule))
    logs, replays, rounds, replay_total = [], [], 0, 0
    for _ in range(sets):
        ratios = rounds_until_settled(lambda: truth * math.exp(rng.gauss(0.0, spread)), schedule, deciding, precision)
        claimed, low, _ = paired_interval(ratios, reported_confidence(schedule, len(ratios), True))
        if low < BAR:
            continue
        rounds += len(ratios)
        replayed = replay_rounds or max(REPLAY_ROUNDS, len(ratios))
        replay_total += replayed
        replay = truth * math.exp(statistics.fmean(rng.gauss(0.0, spread) for _ in range(replayed)))
        logs.append(math.log(claimed / truth))
        replays.append(replay / claimed - 1)
    if not logs:
        return Precision(truth, spread, precision, math.nan, math.nan, math.nan, math.nan, 0.0, 0.0)
    return Precision(truth, spread, precision, math.exp(statistics.fmean(logs)) - 1,
                     statistics.fmean(abs(math.exp(v) - 1) for v in logs),
                     statistics.fmean(map(abs, replays)), sum(abs(r) > 0.10 for r in replays) / len(replays),
                     rounds / len(logs), replay_total / len(logs))


def sequential_table(sets: int, seed: int = 0, precision: float = PRECISION, futile_under: float = FUTILE_UNDER) -> list[Sequential]:
    return [sequential_coverage(noise, truth, sets, seed=seed, precision=precision, futile_under=futile_under)
            for truth in (BAR, 1.1, TRUE_SPEEDUP) for noise in NOISES]


def sequential_within_bounds(result: Sequential) -> bool:
    """93.5-96.5% at the nominal 95%."""
    return 0.935 <= result.covered <= 0.965


def within_bounds(result: Coverage) -> bool:
    """93.5-96.5% at a nominal 95%; at least 98.5% at 99%."""
    if result.level == 0.95:
        return 0.935 <= result.covered <= 0.965
    return result.covered >= 0.985


def aa_verdicts(config, repeats: int, pairs: int, progress: Callable[[str], None] = print) -> list[Verdict]:
    """`repeats` verifications of the baseline plan against itself, each judged against 1.0 and
    run under the verifier's own sequential rule (`advisor.session.verification.Stopping`, its
    looks from 3 to `search.max_pairs` rounds): verified means a plan that does nothing was
    called faster than the baseline. `pairs` is the rule's `search.pairs`."""
    import dataclasses

    from advisor.kinds import baseline_plan
    from advisor.session import round_measures
    from advisor.session.verification import Stopping

    config = dataclasses.replace(config, search=dataclasses.replace(config.search, min_speedup=1.0, pairs=pairs,
                                                                    max_pairs=max(pairs, config.search.max_pairs)))
    plan, measure = baseline_plan(config), round_measures(config)[0]
    verdicts = []
    for repeat in range(1, repeats + 1):
        stopping = Stopping(config, ["A'"], memory_fix=False, progress=lambda line: None)
        rounds = interleave(plan, {"A'": plan}, measure, stopping.schedule[-1] + pairs, enough=stopping,
                            rounds_total=stopping.round_of)
        quiet = rounds.quiet()
        verdict = judge("A/A", quiet.ratios("A'"), 1.0, failures=rounds.failures("A'"), pairs=len(quiet.baseline),
                        confidence=stopping.confidence, set_aside=rounds.set_aside())
        verdicts.append(verdict)
        progress(f"A/A repeat {repeat:2d}/{repeats}: {verdict.speedup:.3f}x  {verdict.low:.3f}-{verdict.high:.3f}x  "
                 f"after {len(quiet.baseline)} rounds  {'called faster' if verdict.verified else 'not faster'}")
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="configs/prep_stall.yaml")
    parser.add_argument("--coverage", action="store_true", help="simulate the interval's coverage (no runs)")
    parser.add_argument("--precision", action="store_true",
                        help="simulate how far verified claims lie from the truth and from a replay (no runs)")
    parser.add_argument("--sets", type=int, default=4000, help="simulated verifications per case")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    if args.coverage:
        print(f"true speedup {TRUE_SPEEDUP}x; per-pair log-ratio sd {NOISE_SD}; {args.sets:,} sets per case")
        results = coverage_table(args.sets)
        for result in results:
            print(result.line() + ("" if within_bounds(result) else "  OUT OF BOUNDS"))
        print(f"{sum(map(within_bounds, results))} of {len(results)} cases within bounds")
        for precision in (0.0, PRECISION):
            print(f"the sequential rule, search.precision {precision}" + (" (stopping at the verdict)" if not precision else ""))
            sequential = sequential_table(args.sets, precision=precision)
            for result in sequential:
                print(result.line() + ("" if sequential_within_bounds(result) else "  OUT OF BOUNDS"))
            print(f"{sum(map(sequential_within_bounds, sequential))} of {len(sequential)} sequential cases within bounds")
        return
    if args.precision:
        for spread in (0.05, 0.1, 0.15, 0.3):
            for truth in (1.3, 2.0):
                for precision in (0.0, PRECISION):  # stopping at the verdict, then the default
                    print(claim_precision(truth, spread, args.sets, precision=precision).line())
        return
    from advisor.kinds import load_config

    config = load_config(args.config)
    print(f"A/A on {config.name}: {args.repeats} verifications under the sequential rule (search.pairs {args.pairs}), "
          "judged against 1.0")
    verdicts = aa_verdicts(config, args.repeats, args.pairs)
    print(f"called faster: {sum(v.verified for v in verdicts)} of {args.repeats}")


if __name__ == "__main__":
    main()
