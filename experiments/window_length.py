"""Does a plan's measured speedup hang on how long its timed window is? A verification round
times `measure.steps` steps (an input plan at least twice the batches its workers can queue); a
user's epoch runs thousands. Within a short window two transients weigh: the batches the workers
queued during the warm-up (served at the step's pace: the rate reads high) and workers still
starting up (the rate reads low). A long window dilutes both.

    python -m experiments.window_length CONFIG PLAN_JSON [--rounds 6] [--times 8]

Each round runs four fresh processes as a verification round measures them (`round_measures`),
order rotated: the baseline and the plan at the config's window, and both again at `--times` as
many steps. Prints each window's speedup (geometric mean of the rounds' ratios, 95% interval) and
the short window's speedup over the long one's, round by round: an interval clear of 1.0 says
claims made on the short window do not hold over a long run.
"""

import argparse
import dataclasses
import json
from pathlib import Path

from advisor.kinds import baseline_plan, load_config
from advisor.session import round_measures
from advisor.verdict import paired_interval
from experiments.agreement import loops_ratio, per_round, rotated_rounds


def with_steps(config, steps: int):
    """The config whose runs time `steps` steps (the warm-up unchanged)."""
    return dataclasses.replace(config, measure=dataclasses.replace(config.measure, steps=steps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("plan", type=Path, help="a JSON object of the plan's knobs (a claim's `plan`)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--times", type=int, default=8, help="the long window's steps over the config's")
    args = parser.parse_args()
    config = load_config(args.config.resolve())
    plan = {**baseline_plan(config), **json.loads(args.plan.read_text())}
    windows = {"short": config, "long": with_steps(config, args.times * config.measure.steps)}
    runs = {}
    for window, windowed in windows.items():
        measure, measure_reference = round_measures(windowed)
        runs[(window, "baseline")] = lambda m=measure_reference: m(baseline_plan(config)).samples_per_s
        runs[(window, "plan")] = lambda m=measure: m(plan).samples_per_s
    rates = rotated_rounds(runs, args.rounds, lambda line: print(line, flush=True))
    for window, windowed in windows.items():
        mid, low, high = paired_interval([r for r in per_round(rates, window) if r is not None])
        print(f"{window:<5} window ({windowed.measure.steps} steps asked): speedup {mid:.2f}x (95% {low:.2f}-{high:.2f}x)")
    mid, low, high = loops_ratio(rates, "short", "long")
    print(f"short / long, round by round: {mid:.3f}x (95% {low:.3f}-{high:.3f}x): "
          + ("the window's length makes no difference the rounds can see" if low <= 1.0 <= high
             else "the short window's claim does not hold over a long run"))


if __name__ == "__main__":
    main()
