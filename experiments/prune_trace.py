"""How a trial's running rate evolves across its timed window, recorded whole (never pruning), so
that a pruning rule can be judged against what each trial finished at.

    python -m experiments.prune_trace record NAME [...] [--plans 16] [--seed 0]
    python -m experiments.prune_trace replay

`record` measures the baseline and `--plans` distinct plans drawn at random (as
`experiments.pruning` draws them) and keeps, per trial, every reading its watcher heard (percent of
the window, running rate, seconds since the trial started) in bench-results/traces.json.
`replay` runs the traces, in their order, through the pruner's rule (`search.reachable` under
`search.prune_bar`) and through the running rate alone (under PRUNE_SHARE of the best past 30% of the
window, the rule before it): the trial time each would have saved, the trials it would have
stopped, and those it should not have (within 15% of the best so far, or the overall winner). Then,
per tenth of the window where it judges, how far under its final rate each estimate fell at
worst: the margin the rule's bar there has to cover.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from pathlib import Path

from advisor import search
from advisor.diagnosis import collect_evidence
from advisor.kinds import load_config
from advisor.session import measure_with, plan_session
from advisor.session.trials import prunable
from experiments import config_path
from experiments.pruning import plans_to_measure

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "bench-results" / "traces.json"
POLL_S = 0.05  # the parent reads a run's progress this often: a stop lands this late
TOO_CLOSE = 0.85  # a trial stopped though it ended within 15% of the best so far was stopped wrongly
RATE = {"of": 100, "best_case": False}  # readings are kept by percent of the window


def recorder(points: list, started: float):
    last = 0

    def watch(progress: dict) -> str:
        nonlocal last
        if progress.get("seconds") and progress.get("of") and progress["steps"] > last:
            last = progress["steps"]
            rate = progress.get("best") or progress["samples"] / progress["seconds"]
            points.append((100 * last / progress["of"], rate, time.perf_counter() - started))
        return ""

    return watch


def record(name: str, plans: int, seed: int) -> dict:
    config = load_config(config_path(name))
    facts = plan_session(config, collect_evidence(config))
    measure, may_prune = measure_with(config), prunable(config, facts.baseline)
    rows = []
    for params in plans_to_measure(facts.space, facts.baseline, plans, seed):
        plan, points, started = {**facts.baseline, **params}, [], time.perf_counter()
        run = measure(plan, watch=recorder(points, started))
        feasible = search.is_feasible(run, config.constraints.max_memory_mb)
        rows.append({"plan": params, "prunable": may_prune(plan), "feasible": feasible,
                     "rate": run.samples_per_s if feasible else 0.0, "seconds": time.perf_counter() - started,
                     "points": points})
        print(f"  {name}: {rows[-1]['rate']:10,.1f}/s in {rows[-1]['seconds']:5.2f} s, {len(points)} readings, {params}", flush=True)
    return {"name": name, "rows": rows}


def rule_estimate(readings: dict) -> float:
    return search.reachable(readings, RATE)


def running_rate(readings: dict) -> float:
    percent = max(readings)
    return readings[percent] if percent >= 30 else math.inf


# each rule: what a trial is estimated to end at, and the share of the best under which it is stopped
RULES = {"the rule": (rule_estimate, lambda readings: search.prune_bar(readings, RATE)),
         "running rate past 30%": (running_rate, lambda readings: search.PRUNE_SHARE)}


def replay(rows: list, rule) -> tuple[float, int, list]:
    """(share of trial time saved, trials stopped, those stopped wrongly) under `rule`."""
    estimate, bar = rule
    best, saved, stopped, wrong = None, 0.0, 0, []
    winner = max(range(len(rows)), key=lambda i: rows[i]["rate"])
    for i, row in enumerate(rows):
        readings, cut = {}, None
        for percent, rate, seconds in row["points"] if row["prunable"] and best else ():
            readings[percent] = rate
            if estimate(readings) < bar(readings) * best:
                cut = seconds + POLL_S
                break
        if cut is not None and cut < row["seconds"]:
            saved, stopped = saved + row["seconds"] - cut, stopped + 1
            if row["rate"] >= TOO_CLOSE * best or i == winner:
                wrong.append(i)
        elif row["feasible"]:
            best = max(best or 0.0, row["rate"])
    return saved / sum(row["seconds"] for row in rows), stopped, wrong


def worst_by_tenth(traces: dict, estimate) -> dict[int, float]:
    """Per tenth of the window (30% and past as one), the lowest estimate / final rate of any
    reading where the estimate judges (from PRUNE_EARLY's percent, or 30%)."""
    worst: dict[int, float] = defaultdict(lambda: math.inf)
    for trace in traces.values():
        for row in (r for r in trace["rows"] if r["feasible"] and r["prunable"]):
            readings = {}
            for percent, rate, _ in row["points"]:
                readings[percent] = rate
                value = estimate(readings)
                if value < math.inf:
                    tenth = min(int(percent // 10) * 10, 30)
                    worst[tenth] = min(worst[tenth], value / row["rate"])
    return dict(sorted(worst.items()))


def print_replay(traces: dict) -> None:
    print("| trace | " + " | ".join(f"{label}: saved, stopped (wrongly)" for label in RULES) + " |\n|---|---|---|")
    for key, trace in traces.items():
        cells = [replay(trace["rows"], rule) for rule in RULES.values()]
        print(f"| {key} | " + " | ".join(f"{saved:.0%}, {stopped} ({len(wrong)})" for saved, stopped, wrong in cells) + " |")
    for label, (estimate, _) in RULES.items():
        worst = worst_by_tenth(traces, estimate)
        print(f"worst estimate / final, {label}: " + ", ".join(f"{t}%{'+' if t == 30 else ''} {v:.2f}" for t, v in worst.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("record", "replay"))
    parser.add_argument("names", nargs="*")
    parser.add_argument("--plans", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    traces = json.loads(TRACES.read_text()) if TRACES.exists() else {}
    if args.what == "replay":
        return print_replay(traces)
    TRACES.parent.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        traces[f"{name}/{args.seed}"] = record(name, args.plans, args.seed)
        TRACES.write_text(json.dumps(traces))  # each reference as it finishes


if __name__ == "__main__":
    main()
