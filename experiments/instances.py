"""Model instances (`serving`), threads against processes: each service's capacity under its
p95 SLO with 1 instance (the baseline), N threads and N forked processes, interleaved round by
round in fresh runs, as a verification's rounds are measured.

    python -m experiments.instances [NAME ...] [--instances 2] [--rounds 5]

NAME: a capacity config under configs/ (default: serve_capacity, serve_encoder_capacity).
Prints each arm's mean capacity and its paired ratio over the baseline with the 95% interval.
"""

import argparse
import dataclasses
from pathlib import Path

from advisor.kinds import kind_of, load_config
from advisor.session import round_measures
from advisor.verdict import paired_interval
from advisor.verify import interleave
from experiments import config_path

ROOT = Path(__file__).resolve().parent.parent


def compare(name: str, instances: int, rounds: int) -> list[str]:
    config = load_config(config_path(name))
    config = dataclasses.replace(config, search=dataclasses.replace(config.search, storage=None))
    baseline = kind_of(config.kind).baseline_plan(config)
    arms = {mode: {**baseline, "serving.instances": instances, "serving.mode": mode} for mode in ("thread", "process")}
    measure, measure_reference = round_measures(config)
    rounds_run = interleave(baseline, arms, measure, rounds, lambda line: print(f"  {line.strip()}", flush=True),
                            measure_reference=measure_reference)
    mean = lambda runs: sum(r.samples_per_s for r in runs if r.ok) / max(1, sum(r.ok for r in runs))  # noqa: E731
    lines = [f"{name}: capacity within {config.constraints.p95_ms:g} ms p95, {rounds} rounds; "
             f"baseline (1 instance) {mean(rounds_run.baseline):,.0f}/s"]
    for mode in arms:
        ratios = rounds_run.ratios(mode)
        speedup, low, high = paired_interval(ratios) if ratios else (float("nan"),) * 3
        failed = sum(not r.ok for r in rounds_run.candidates[mode])
        lines.append(f"  {instances} {mode} instances: {mean(rounds_run.candidates[mode]):,.0f}/s, {speedup:.2f}x "
                     f"(95% {low:.2f}-{high:.2f}x)" + (f", {failed} failed run(s)" if failed else ""))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=["serve_capacity", "serve_encoder_capacity"])
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    report = [line for name in args.names for line in compare(name, args.instances, args.rounds)]
    print("\n".join(report))


if __name__ == "__main__":
    main()
