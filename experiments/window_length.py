"""Is a verification round better spent on a longer timed window? At a fixed step count
(`measure.steps`) a plan 3x as fast is timed for a third of the time, and a window of a second or
so reads the host's moment; a round's run also pays its interpreter's start, the job's build and
the warm-up, whatever its window. Verification rounds now time at least `ROUND_WINDOW_S`
(`advisor.session.bundle.windowed`).

    python -m experiments.window_length CONFIG PLAN_JSON [--rounds 8] [--seconds 4]

Each round runs four fresh processes as a verification round measures them, order rotated: the
baseline and the plan at exactly `measure.steps`, and both again with the window lasting at
least `--seconds`. Prints, per window, the speedup (geometric mean of the rounds' ratios, 95%
interval), the spread of the rounds' ratios (standard deviation of their logs), the seconds a
round of the two runs took, and the rounds-times-seconds that each window needs for one
interval width (variance x seconds, relative to the fixed-step window's: under 1, the longer
window buys a given precision in less time); then the fixed-step window's speedup over the
longer one's, round by round (clear of 1.0: the window's length moves the claim itself).
"""

import argparse
import dataclasses
import json
import math
import statistics
import time
from pathlib import Path

from advisor.config import AdvisorConfig, load_config
from advisor.kinds import baseline_plan
from advisor.session import measure_with
from advisor.verify import paired_interval
from experiments.agreement import loops_ratio, per_round, rotated_rounds


def with_window(config: AdvisorConfig, seconds: float) -> AdvisorConfig:
    """The config whose training windows last at least `seconds` (0: exactly `measure.steps`)."""
    return dataclasses.replace(config, measure=dataclasses.replace(config.measure, min_window_s=seconds))


def spread(ratios: list[float]) -> float:
    """The standard deviation of the ratios' logs (0.1: about +-10% a round)."""
    return statistics.stdev(math.log(r) for r in ratios) if len(ratios) > 1 else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("plan", type=Path, help="a JSON object of the plan's knobs (a claim's `plan`)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=4.0, help="the longer window's least length")
    args = parser.parse_args()
    config = load_config(args.config.resolve())
    plan = {**baseline_plan(config), **json.loads(args.plan.read_text())}
    windows = {"steps": with_window(config, 0.0), "longer": with_window(config, args.seconds)}
    seconds: dict = {window: [] for window in windows}

    def timed(window: str, measure, run_plan: dict) -> float:
        started = time.perf_counter()
        rate = measure(run_plan).samples_per_s
        seconds[window].append(time.perf_counter() - started)
        return rate

    runs = {}
    for window, windowed_config in windows.items():
        measure = measure_with(windowed_config, fresh=True)
        reference = measure_with(windowed_config, capped=False, fresh=True)
        runs[(window, "baseline")] = lambda w=window, m=reference: timed(w, m, baseline_plan(config))
        runs[(window, "plan")] = lambda w=window, m=measure: timed(w, m, plan)
    rates = rotated_rounds(runs, args.rounds, lambda line: print(line, flush=True))
    cost = {}
    for window in windows:
        ratios = [r for r in per_round(rates, window) if r is not None]
        mid, low, high = paired_interval(ratios)
        round_s = 2 * statistics.fmean(seconds[window])
        cost[window] = spread(ratios) ** 2 * round_s
        label = f"{config.measure.steps} steps" if window == "steps" else f"{config.measure.steps} steps, {args.seconds:g} s at least"
        print(f"{window:<6} window ({label}): speedup {mid:.2f}x (95% {low:.2f}-{high:.2f}x), rounds' spread "
              f"{spread(ratios):.1%}, {round_s:.1f} s a round, time for one precision x{cost[window] / cost['steps']:.2f}")
    mid, low, high = loops_ratio(rates, "steps", "longer")
    print(f"steps / longer, round by round: {mid:.3f}x (95% {low:.3f}-{high:.3f}x): "
          + ("the window's length makes no difference the rounds can see" if low <= 1.0 <= high
             else "the window's length moves the claim"))


if __name__ == "__main__":
    main()
