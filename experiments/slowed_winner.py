"""A session whose best trial carries a recipe that slows it: does the advice drop that recipe?

    python -m experiments.slowed_winner [NAME] [--plan '{"key": value, ...}'] [--recipes a,b]

Runs `advisor optimize` on the reference (default: the quickstart) with two trials: the baseline
and `--plan`, queued first (default: four DataLoader workers with one intra-op thread, which on
2 cores slows the step that the workers leave as the bottleneck). Prints the ranked
recommendations: the plan without the slowing recipe should lead, with why.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

from advisor.session import optimize
from experiments.bench import scratch_config

SLOWED = {"dataloader.num_workers": 4, "dataloader.prefetch_factor": 4, "dataloader.persistent_workers": True,
          "threads.intra_op": 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", default="quickstart")
    parser.add_argument("--plan", type=json.loads, default=SLOWED)
    parser.add_argument("--recipes", default="dataloader,threads")
    args = parser.parse_args()
    config = scratch_config(args.name, Path(tempfile.mkdtemp(prefix="slowed-winner-")))
    config = dataclasses.replace(config, search=dataclasses.replace(
        config.search, trials=2, recipes=tuple(args.recipes.split(","))))
    result = optimize(config, print, warm_start=(args.plan,))
    print("\n| rank | trial | changes | speedup (95%) | verified | why it leads |\n|---:|---:|---|---|---|---|")
    for rec in result.recommendations:
        changes = ", ".join(f"{k}={v}" for k, v in rec.changes.items())
        print(f"| {rec.rank} | {rec.trial} | {changes} | {rec.speedup:.2f}x ({rec.interval[0]:.2f}-{rec.interval[1]:.2f}) | "
              f"{'yes' if rec.verified else 'no'} | {rec.leads_because or '-'} |")


if __name__ == "__main__":
    main()
