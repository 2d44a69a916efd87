"""Where a training loop drops its gradients moves each plan's speed unevenly.

    python -m experiments.placement [CONFIG] [PLAN_JSON] [--rounds 6]

Runs the plain loop (experiments/plain_loop.py) written the usual way (zero_grad first) and
with the gradients dropped just before backward, each with the baseline and the plan
(default: compute_bound with bf16 autocast), interleaved round by round, every run a fresh
process; prints each placement's speedup of the plan over its own baseline. advisor's
harness drops them first, as users write it: with the other placement its claims did not
reproduce in users' loops (compute_bound: claimed 1.55x, plain loop 1.17x).
"""

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from experiments import config_path

ROOT = Path(__file__).resolve().parent.parent


def rate(config: Path, plan_file: Path, late: bool) -> float:
    command = [sys.executable, "-m", "experiments.plain_loop", str(config), str(plan_file)]
    output = subprocess.run(command + (["--late-zero-grad"] if late else []), cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default=str(config_path("compute_bound")))
    parser.add_argument("plan", nargs="?", default='{"amp.dtype": "bfloat16"}')
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    config = Path(args.config).resolve()
    ratios: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as folder:
        base_file, plan_file = Path(folder) / "base.json", Path(folder) / "plan.json"
        base_file.write_text("{}")
        plan_file.write_text(args.plan)
        for index in range(args.rounds):
            for late in ((False, True) if index % 2 == 0 else (True, False)):
                base = rate(config, base_file, late)
                ratios[late].append(rate(config, plan_file, late) / base)
    for late, values in ratios.items():
        speedup = math.exp(statistics.fmean(math.log(v) for v in values))
        print(f"{'dropped before backward' if late else 'zero_grad first (usual)':<26} {args.plan}: {speedup:.3f}x  "
              f"(rounds: {', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
