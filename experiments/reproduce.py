"""Checks advisor's claims from outside advisor: each reference workload's top recommendation,
applied by hand in a plain training loop, against the plain baseline loop.

    python -m experiments.reproduce [NAME ...] [--rounds 5]

Reads each workload's latest configs/advisor-results/<name>/*/recommendations.json (run
`advisor optimize configs/<name>.yaml` first), then interleaves the plain baseline loop and
the plain recommended loop (experiments/plain_loop.py), each run a fresh process, and prints
the claimed speedup, the reproduced one, and the relative error (the bar is 15%).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from experiments import config_path

ROOT = Path(__file__).resolve().parent.parent
REFERENCES = ("quickstart", "fetch_stall", "prep_stall", "compute_bound", "memory_budget", "overhead", "remote_fetch")
BAR = 0.15


def plain_run(config: Path, plan_file: Path) -> float:
    """One run of the plain loop under the plan: its rate."""
    return plain_result(config, plan_file)["samples_per_s"]


def plain_result(config: Path, plan_file: Path, flags: tuple[str, ...] = ()) -> dict:
    """One run of the plain loop under the plan (its rate, its page faults a step); the allocator's
    thresholds, which a user sets in the shell that starts the job (the snippet's `export`), are
    set in its environment. `flags`: the loop's own options (`--split-always`)."""
    from advisor.recipes.allocator import thresholds

    keep_mb = json.loads(plan_file.read_text()).get("allocator.keep_mb")
    env = {**os.environ, **({name: str(value) for name, value in thresholds(keep_mb).items()} if keep_mb else {})}
    output = subprocess.run(
        [sys.executable, "-m", "experiments.plain_loop", str(config), str(plan_file), *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def plain_speedup(config: Path, plan: dict, rounds: int) -> tuple[float, float, float]:
    """The plan's speedup over the baseline in the plain loop: `rounds` interleaved pairs (the
    order alternating), each run a fresh process; the geometric mean and its 95% interval."""
    from advisor.verdict import paired_interval

    with tempfile.TemporaryDirectory() as folder:
        baseline_file, plan_file = Path(folder) / "baseline.json", Path(folder) / "plan.json"
        baseline_file.write_text(json.dumps({}))
        plan_file.write_text(json.dumps(plan))
        ratios = []
        for index in range(rounds):
            if index % 2 == 0:
                base = plain_run(config, baseline_file)
                ratios.append(plain_run(config, plan_file) / base)
            else:
                fixed = plain_run(config, plan_file)
                ratios.append(fixed / plain_run(config, baseline_file))
    return paired_interval(ratios)


def latest_payload(name: str) -> dict | None:
    found = sorted((config_path(name).parent / "advisor-results" / name).glob("*/recommendations.json"))
    return json.loads(found[-1].read_text()) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(REFERENCES))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'workload':<15}{'recommendation':<48}{'claimed':>9}{'plain loop':>12}{'error':>8}  within 15%")
    for name in args.names:
        payload = latest_payload(name)
        verified = [r for r in (payload or {}).get("recommendations", []) if r["verified"]]
        if not verified:
            print(f"{name:<15}{'(no verified recommendation)':<48}")
            continue
        top = verified[0]
        measured, _, _ = plain_speedup(config_path(name), top["plan"], args.rounds)
        error = measured / top["speedup"] - 1
        changes = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in top["changes"].items())[:46]
        print(f"{name:<15}{changes:<48}{top['speedup']:>8.2f}x{measured:>11.2f}x{error:>+8.1%}  {'yes' if abs(error) <= BAR else 'NO'}")


if __name__ == "__main__":
    main()
