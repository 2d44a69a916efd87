"""advisor against random search over several seeds, both judged against the exhaustive grid.

    python -m experiments.seeds [NAME] [--seeds 5] [--rounds 3] [--out bench-results]

For one reference workload (default: shard_open, the two-knob reference): the grid measures
every distinct plan of the knobs advisor searches, once, and picks the fastest. Then, for each
seed, `advisor optimize` runs end to end (its verified #1, or the default when nothing
verified), and random search runs with advisor's trial budget of that seed. Finally every
distinct pick is measured again, interleaved round by round with the grid's pick, so each is
judged as a ratio to it, measured at the same moments. Reported: each seed's picks and ratios,
and the share of seeds in which each search came within 5% of the grid's pick.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from advisor import search
from advisor.plan import effective, plan_key
from advisor.recipes import by_name
from advisor.session import measure_with, optimize, round_measures
from advisor.session.planning import search_space
from advisor.verdict import paired_interval
from advisor.verify import interleave
from experiments.bench import grid, pick, run_grid, run_search, scratch_config

WITHIN = 0.95  # "within 5% of the grid's pick"


def changes(plan: dict, baseline: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in effective(plan).items() if v != baseline.get(k)) or "default"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", default="shard_open")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args()
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)

    picks: list[dict] = []
    for seed in range(args.seeds):
        base = scratch_config(args.name, folder)
        config = dataclasses.replace(base, measure=dataclasses.replace(base.measure, seed=seed))
        print(f"seed {seed}: advisor optimize", flush=True)
        result = optimize(config, lambda line: print("  " + line.strip(), flush=True))
        top = next((r for r in result.recommendations if r.verified), None)
        baseline = result.baseline
        space = search_space([by_name(n) for n in result.chosen], result.context)
        budget = result.trials_run
        print(f"seed {seed}: random search, {budget} trials", flush=True)
        study = search.random_study({key: baseline[key] for key in space}, seed=seed)
        trials, _ = run_search(study, space, baseline, measure_with(config), budget, config, lambda line: None)
        picks.append({"seed": seed, "trials": budget, "advisor": top.plan if top else baseline,
                      "random": pick(trials, baseline, config), "advisor_s": result.finished - result.started})

    config = scratch_config(args.name, folder)
    plans = grid(space, baseline)
    print(f"grid: {len(plans)} plans", flush=True)
    grid_trials, grid_s = run_grid(plans, measure_with(config), config, lambda line: None)
    best = pick(grid_trials, baseline, config)

    distinct = {plan_key(p[arm]): p[arm] for p in picks for arm in ("advisor", "random")}
    distinct.pop(plan_key(best), None)
    labels = {key: f"plan {index}" for index, key in enumerate(distinct, start=1)}
    print(f"{len(distinct)} distinct pick(s) against the grid's, interleaved, {args.rounds} rounds", flush=True)
    rounds = interleave(best, {labels[key]: plan for key, plan in distinct.items()}, round_measures(config)[0], args.rounds,
                        lambda line: print(line, flush=True), reference="grid's pick")

    def ratio(plan: dict) -> float:
        key = plan_key(plan)
        if key not in labels:
            return 1.0
        ratios = rounds.ratios(labels[key])
        return paired_interval(ratios)[0] if ratios else math.nan

    lines = [f"{args.name}: grid {len(plans)} plans in {grid_s / 60:.1f} min, its pick: {changes(best, baseline)}", "",
             "| seed | trials | advisor's pick | advisor / grid | random search's pick | random / grid |",
             "|---:|---:|---|---:|---|---:|"]
    for p in picks:
        p["advisor_ratio"], p["random_ratio"] = ratio(p["advisor"]), ratio(p["random"])
        lines.append(f"| {p['seed']} | {p['trials']} | {changes(p['advisor'], baseline)} | {p['advisor_ratio']:.2f}x | "
                     f"{changes(p['random'], baseline)} | {p['random_ratio']:.2f}x |")
    share = {arm: sum(p[f"{arm}_ratio"] >= WITHIN for p in picks) / len(picks) for arm in ("advisor", "random")}
    lines += ["", f"within 5% of the grid's pick: advisor {share['advisor']:.0%} of seeds, "
                  f"random search {share['random']:.0%} (equal budgets)"]
    text = "\n".join(lines)
    print("\n" + text)
    (folder / f"seeds-{args.name}.md").write_text(text + "\n")
    (folder / f"seeds-{args.name}.json").write_text(json.dumps({"picks": picks, "grid_pick": best, "share": share},
                                                              indent=2, default=str))


if __name__ == "__main__":
    main()
