"""Verification rounds three ways: what they cost and whether they say the same.

    python -m experiments.kept_rounds [CONFIG] [--plan JSON] [--rounds 9] [--blocks 2] [--ways fresh,ahead,kept]

For a training config (default configs/quickstart.yaml, its loader fix), runs `--blocks` blocks
of `--rounds` interleaved rounds (the baseline, then the plan) each way, the ways rotating
block by block: "fresh", every run a new interpreter started for it; "ahead", every run a new
interpreter started before it, a batch at once (`launch.ready_interpreter`, the default); and
"kept", the rounds past the first `kept.DRAWS` run again in the first ones' interpreters. Prints
each round's rates, then per way: the seconds a round took, the baseline's mean rate, and the
ratios' geometric mean with its spread; the kept rounds past the first `DRAWS` are shown
apart, since they are the runs that differ. An "ahead" round also says how much of it advisor
waited on its interpreters' imports (they import what a session's do: torch, the harness and
the kind's own `preload`).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PLAN = {"dataloader.num_workers": 2, "dataloader.persistent_workers": True}


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


IMPORTS_WAITED = [0.0]  # seconds spent waiting for interpreters started ahead to import


def timing_imports() -> None:
    """Counts the seconds `launch.ready_interpreter` and `templates._next_template` take (a batch's imports,
    where none waits) in IMPORTS_WAITED."""
    from advisor.harness import launch, templates

    def timed(untimed):
        def waited(*args, **kwargs):
            started = time.perf_counter()
            try:
                return untimed(*args, **kwargs)
            finally:
                IMPORTS_WAITED[0] += time.perf_counter() - started
        return waited

    launch.ready_interpreter = timed(launch.ready_interpreter)
    templates._next_template = timed(templates._next_template)


def one_block(config, baseline: dict, plan: dict, rounds: int, way: str) -> list[dict]:
    from advisor.harness import kept, run_measurement

    fresh = {"fresh": True, "ahead": "ahead", "template": "template", "kept": "kept"}[way]
    found = []
    try:
        for index in range(rounds):
            started, IMPORTS_WAITED[0] = time.perf_counter(), 0.0
            base = run_measurement(config, baseline, "full", config.measure.steps, config.measure.timeout_s, fresh=fresh)
            fixed = run_measurement(config, plan, "full", config.measure.steps, config.measure.timeout_s, fresh=fresh)
            seconds = time.perf_counter() - started
            ratio = fixed.samples_per_s / base.samples_per_s if base.ok and fixed.ok and base.samples_per_s else None
            found.append({"way": way, "round": index, "seconds": seconds, "imports_s": IMPORTS_WAITED[0], "base": base.samples_per_s,
                          "plan": fixed.samples_per_s, "ratio": ratio, "interpreters": [base.interpreter, fixed.interpreter],
                          "peak_mb": [base.peak_memory_mb, fixed.peak_memory_mb]})
            print(json.dumps(found[-1]), flush=True)
    finally:
        kept.close_all()
    return found


def summary(rows: list[dict], label: str) -> str:
    if not rows:
        return f"{label:>22}: no rounds"
    ratios = [row["ratio"] for row in rows if row["ratio"]]
    spread = statistics.stdev(math.log(r) for r in ratios) if len(ratios) > 1 else float("nan")
    imports = statistics.fmean(r["imports_s"] for r in rows)
    waited = f" ({imports:.1f} s of it waiting on imports)" if imports > 0.05 else ""
    return (f"{label:>22}: {len(rows):2d} rounds, {statistics.fmean(r['seconds'] for r in rows):5.1f} s a round{waited}, "
            f"baseline {statistics.fmean(r['base'] for r in rows):7.1f}/s, plan {statistics.fmean(r['plan'] for r in rows):7.1f}/s, "
            f"ratio {geomean(ratios):.3f}x (sd of log {spread:.3f})")


def main() -> None:
    from advisor.harness import kept, launch
    from advisor.kinds import baseline_plan, kind_of, load_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default=str(ROOT / "configs" / "quickstart.yaml"))
    parser.add_argument("--plan", help="the plan's changes as JSON (default: the quickstart's loader fix)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--ways", default="fresh,ahead,kept", help="comma-separated: fresh, ahead, kept")
    args = parser.parse_args()
    config = load_config(Path(args.config))
    # as a session's, interpreters started ahead import the kind's modules; no fork server is started,
    # since no run here forks from one, and its imports would share the first round's machine
    launch.use_preload(kind_of(config).preload)
    timing_imports()
    baseline = baseline_plan(config)
    plan = {**baseline, **(json.loads(args.plan) if args.plan else DEFAULT_PLAN)}
    ways = args.ways.split(",")
    rows = []
    for block in range(args.blocks):
        shift = block % len(ways)
        for way in ways[shift:] + ways[:shift]:
            rows += one_block(config, baseline, plan, args.rounds, way)
    for way in ways:
        print(summary([r for r in rows if r["way"] == way], way))
    if "kept" in ways:
        print(summary([r for r in rows if r["way"] == "kept" and r["round"] >= kept.DRAWS], f"kept, rounds past {kept.DRAWS}"))


if __name__ == "__main__":
    main()
