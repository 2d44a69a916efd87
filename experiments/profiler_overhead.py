"""Shows why timing runs and profiling runs are separate: the profiler slows what it watches.

    python -m experiments.profiler_overhead [configs/compute_bound.yaml] [--rounds 3]

Interleaves the compute-only timing run (one batch reused) and the profiling run (which also
times only the step) of the baseline plan, each in a fresh child, and prints each round's
throughput from both and their ratio.
"""

import argparse
import statistics

from advisor.harness import run_measurement
from advisor.kinds import baseline_plan, load_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="configs/compute_bound.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    config = load_config(args.config)
    plan = baseline_plan(config)
    steps, timeout = config.measure.steps, config.measure.timeout_s
    ratios = []
    print(f"{config.name}: samples/s of the timing run and of the profiling run, interleaved")
    for round_ in range(1, args.rounds + 1):
        timed = run_measurement(config, plan, "synthetic", steps, timeout)
        profiled = run_measurement(config, plan, "profile", steps, timeout)
        profiled_rate = profiled.operators["profiled_samples_per_s"]
        ratios.append(profiled_rate / timed.samples_per_s)
        print(f"round {round_}: timing run {timed.samples_per_s:8,.0f}   profiling run {profiled_rate:8,.0f}"
              f"   profiled/timed {ratios[-1]:.2f}")
    print(f"median profiled/timed: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
