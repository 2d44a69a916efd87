"""Whether a plan's rate hangs on its place in a verification round.

    python -m experiments.round_position [CONFIG] [--plan JSON] [--rounds 10] [--ways batch,one]

Runs `--rounds` rounds of the baseline and the plan in new interpreters started ahead, as a
session's verification does (the fork server warmed with the kind's modules, one forked run of
the plan first, as a session's trial is), the order rotating round by round: the baseline first
in even rounds, the plan first in odd ones. "batch" starts the interpreters a batch at once, one
a core (`launch.READY_MOST`, a session's way); "one", one at a time, each just before its run.
Prints each round, then per way the plan's mean rate where it ran first and where it ran second,
and their ratio (second / first). The ways run one after another, each a block of its own.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PLAN = {"dataloader.num_workers": 4, "dataloader.persistent_workers": True}


def one_way(config, baseline: dict, plan: dict, rounds: int, way: str) -> dict[str, list[float]]:
    from advisor.harness import launch, run_measurement

    launch.READY_MOST = {"batch": 4, "one": 1}[way]
    by_place: dict[str, list[float]] = {"first": [], "second": []}
    for index in range(rounds):
        order = [("baseline", baseline), ("plan", plan)] if index % 2 == 0 else [("plan", plan), ("baseline", baseline)]
        rates = {name: run_measurement(config, chosen, "full", config.measure.steps, config.measure.timeout_s,
                                       fresh="ahead").samples_per_s for name, chosen in order}
        place = "second" if index % 2 == 0 else "first"
        by_place[place].append(rates["plan"])
        print(json.dumps({"way": way, "round": index, "plan ran": place, **{k: round(v) for k, v in rates.items()}}), flush=True)
    launch.end_ready()
    return by_place


def main() -> None:
    from advisor.harness import launch, run_measurement
    from advisor.kinds import baseline_plan, kind_of, load_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default=str(ROOT / "configs" / "quickstart.yaml"))
    parser.add_argument("--plan", help="the plan's changes as JSON (default: four persistent loader workers)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--ways", default="batch,one", help="comma-separated: batch, one")
    args = parser.parse_args()
    config = load_config(Path(args.config))
    launch.warm_up(kind_of(config).preload)
    baseline = baseline_plan(config)
    plan = {**baseline, **(json.loads(args.plan) if args.plan else DEFAULT_PLAN)}
    run_measurement(config, plan, "full", config.measure.steps, config.measure.timeout_s)  # a trial, forked
    found = {way: one_way(config, baseline, plan, args.rounds, way) for way in args.ways.split(",")}
    for way, by_place in found.items():
        first, second = statistics.fmean(by_place["first"]), statistics.fmean(by_place["second"])
        print(f"{way:>6}: the plan first in its round {first:,.0f}/s ({', '.join(f'{r:,.0f}' for r in by_place['first'])}), "
              f"second {second:,.0f}/s ({', '.join(f'{r:,.0f}' for r in by_place['second'])}): second / first {second / first:.3f}")


if __name__ == "__main__":
    main()
