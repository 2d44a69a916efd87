"""How the C allocator's history moves a training loop's speed, and why advisor's claims and a
plain loop's can part.

    python -m experiments.allocator [CONFIG] [--rounds 3]

Runs the baseline and bf16 plans of a training config (default compute_bound) three ways, each
run a fresh process: advisor's measurement child (`python -m advisor.harness.child`), and the
plain loop (experiments/plain_loop.py), each also under fixed glibc thresholds
(MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_: nothing returned to the kernel, so no page is
faulted in again). Prints each run's rate and the minor page faults of its whole process, and
each loop's bf16 speedup. Page faults per run are the allocator's footprint: where two loops
differ in them, their fp32 rates differ, and so do the speedups they claim for one plan.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from experiments import config_path

ROOT = Path(__file__).resolve().parent.parent
FIXED = {"MALLOC_MMAP_THRESHOLD_": str(256 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**30)}


def faults_of(command: list[str], env: dict) -> tuple[str, int]:
    """stdout of the command, and the minor page faults it and its children took."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    output = subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout
    return output, resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before


def harness_rate(config: Path, plan: dict, env: dict) -> tuple[float, int]:
    from advisor.kinds import baseline_plan, load_config

    loaded = load_config(config)
    with tempfile.TemporaryDirectory() as folder:
        spec, result = Path(folder) / "spec.json", Path(folder) / "result.json"
        spec.write_text(json.dumps({"config": str(config), "plan": {**baseline_plan(loaded), **plan}, "mode": "full",
                                    "steps": loaded.measure.steps, "memory_limit_mb": 8000}))
        _, faults = faults_of([sys.executable, "-m", "advisor.harness.child", str(spec), str(result)], env)
        return json.loads(result.read_text())["samples_per_s"], faults


def plain_rate(config: Path, plan: dict, env: dict) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as folder:
        plan_file = Path(folder) / "plan.json"
        plan_file.write_text(json.dumps(plan))
        output, faults = faults_of([sys.executable, "-m", "experiments.plain_loop", str(config), str(plan_file)], env)
        return json.loads(output.strip().splitlines()[-1])["samples_per_s"], faults


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default=str(config_path("compute_bound")))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    config = Path(args.config).resolve()
    plans = {"fp32": {}, "bf16": {"amp.dtype": "bfloat16"}}
    for allocator, extra in (("glibc default", {}), ("fixed thresholds", FIXED)):
        env = {**os.environ, **extra}
        rates: dict = {}
        for index in range(args.rounds):
            order = [(loop, name) for loop in ("advisor", "plain") for name in plans]
            for loop, name in (order if index % 2 == 0 else order[::-1]):
                measure = harness_rate if loop == "advisor" else plain_rate
                rate, faults = measure(config, plans[name], env)
                rates.setdefault((loop, name), []).append(rate)
                print(f"{allocator:<17} {loop:<8} {name}: {rate:8,.0f} samples/s  {faults:9,} minor faults", flush=True)
        for loop in ("advisor", "plain"):
            fp32, bf16 = geomean(rates[(loop, "fp32")]), geomean(rates[(loop, "bf16")])
            print(f"{allocator:<17} {loop:<8} fp32 {fp32:,.0f}, bf16 {bf16:,.0f}: bf16 speedup {bf16 / fp32:.2f}x")


if __name__ == "__main__":
    main()
