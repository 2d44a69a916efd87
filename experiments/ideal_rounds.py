"""Does the ideal's run in a verification's first rounds move the candidate's ratio to the
baseline? An input fix's verification runs the baseline fed one reused batch (the ideal) beside
the baseline and the candidate in its first `IDEAL_ROUNDS` rounds, forked from the session's fork
server while the others fork from their round's template.

    python -m experiments.ideal_rounds CONFIG PLAN_JSON [--blocks 12]

Blocks of two rounds (the order rotated as a verification's first two are), alternately with and
without the ideal, each run measured as a session's round measures it. Prints each round's rates,
the plan's speedup with and without the ideal beside it, and their ratio block pair by block pair:
an interval that holds 1.0 says the ideal's run leaves the verdict alone.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path


def main() -> None:
    from advisor.harness import kept, launch
    from advisor.kinds import baseline_plan, kind_of, load_config
    from advisor.session.bundle import round_measures
    from advisor.session.verification import measure_ideal
    from advisor.verdict import paired_interval

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("plan", help="the plan's changes, as JSON")
    parser.add_argument("--blocks", type=int, default=12)
    args = parser.parse_args()
    config = load_config(args.config.resolve())
    launch.use_preload(kind_of(config).preload)  # the imports a session's interpreters make
    candidate_measure, reference_measure = round_measures(config)
    baseline = baseline_plan(config)
    plans = {"baseline": baseline, "plan": {**baseline, **json.loads(args.plan)}, "ideal": baseline}
    measures = {"baseline": reference_measure, "plan": candidate_measure,
                "ideal": lambda plan: measure_ideal(config, plan)}
    speedups: dict[bool, list[float]] = {True: [], False: []}
    try:
        for block in range(args.blocks):
            with_ideal = block % 2 == 0
            names = ["baseline", "plan", *(["ideal"] if with_ideal else [])]
            for shift in range(2):
                order = names[shift:] + names[:shift]
                rates = {name: measures[name](plans[name]).samples_per_s for name in order}
                speedups[with_ideal].append(rates["plan"] / rates["baseline"])
                print(f"block {block + 1}/{args.blocks}, {'with' if with_ideal else 'without'} the ideal: "
                      + ", ".join(f"{name} {rate:,.0f}/s" for name, rate in rates.items()), flush=True)
    finally:
        kept.close_all()
    for with_ideal, ratios in speedups.items():
        spread = statistics.stdev(math.log(r) for r in ratios) if len(ratios) > 1 else 0.0
        print(f"{'with' if with_ideal else 'without'} the ideal: {'%.3fx (%.3f-%.3fx)' % paired_interval(ratios)}, "
              f"{len(ratios)} rounds, sd of its log {spread:.3f}")
    paired = [x / y for x, y in zip(speedups[True], speedups[False])]
    print(f"with / without, round by round: {'%.3fx (%.3f-%.3fx)' % paired_interval(paired)}")


if __name__ == "__main__":
    main()
