"""Data-parallel training over a real slow link: two nodes, each in its own network namespace,
joined by a veth pair throttled by tc's token bucket (tests/fixtures/netns.py; needs root).

    python -m experiments.data_parallel [--rate 500] [--control] [--diagnose]

Optimizes the wide-MLP reference (about 9.5M parameters, 38 MB of gradients a step) with one
rank per node across the link, and prints the diagnosis's communication evidence beside the
link's own measured rate, then the ranking. `--control` runs the compute-heavy control (a
narrow model on large batches), which must not be called network-bound.
"""

import argparse
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

WIDE = {"model_args": {"features": 512, "hidden": 2048, "depth": 3}, "dataset_args": {"n": 2048, "features": 512},
        "batch_size": 16}
CONTROL = {"model_args": {"features": 64, "hidden": 256, "depth": 6}, "dataset_args": {"n": 65536, "features": 64},
           "batch_size": 4096}


def config_for(link, shape: dict, name: str, port: int) -> dict:
    workloads = ROOT / "experiments" / "workloads" / "mlp.py"
    return {
        "name": name,
        "workload": {"model": f"{workloads}:build_model", "dataset": f"{workloads}:build_dataset", **shape,
                     "optimizer": {"name": "SGD", "lr": 0.01}, "threads": 1,
                     "distributed": {"nodes": 2, "ranks_per_node": 1, "backend": "gloo",
                                     "rendezvous": link.rendezvous(port), "launch": link.launch}},
        "measure": {"warmup_steps": 2, "steps": 10, "timeout_s": 180},
        "search": {"trials": 6, "time_budget_s": 600, "recipes": ["comm_hook", "ddp_buckets"]},
    }


def main() -> None:
    from netns import slow_link, unavailable

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500.0, help="the link's rate, Mbit/s")
    parser.add_argument("--control", action="store_true", help="the compute-heavy control instead")
    parser.add_argument("--diagnose", action="store_true", help="diagnose only")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the namespaces are removed on the way out
    why = unavailable()
    if why:
        sys.exit(f"cannot build the slow link here: {why}")
    with slow_link(args.rate) as link, tempfile.TemporaryDirectory() as folder:
        print(f"link: {link.rate_mbit_s:g} Mbit/s set, {link.measured_mbit_s:,.0f} Mbit/s measured by a socket transfer")
        name = "data_parallel_control" if args.control else "data_parallel_wide"
        path = Path(folder) / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config_for(link, CONTROL if args.control else WIDE, name, 29511)))
        command = "diagnose" if args.diagnose else "optimize"
        extra = [] if args.diagnose else ["--results", str(Path(folder) / "results")]
        subprocess.run([sys.executable, "-m", "advisor", command, str(path), *extra], cwd=folder, check=False)


if __name__ == "__main__":
    main()
