"""What a service's capacity search costs, and the capacity it reports.

    python -m experiments.capacity_time [--layers 6] [--dim 320] [--runs 2] [--code PATH]

Diagnoses a transformer encoder (configs/serve.py, one thread, requests of 64 tokens) asked for
its capacity within a 60 ms p95, open load from 20 requests/s, 200 timed requests a replay,
`--runs` times; one line a run: the capacity, the rates replayed, the seconds the full run (its
capacity search) took and the service time. `--code`: another checkout's advisor (for a
before/after, e.g. `git worktree add /tmp/before REV`). Layers 6, dim 320 serve in about 20 ms
here; layers 8, dim 384 in about 37 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def config_text(layers: int, dim: int) -> dict:
    serve = ROOT / "configs" / "serve.py"
    return {"name": f"capacity_encoder_{layers}x{dim}", "workload": {
        "kind": "infer", "model": f"{serve}:build_encoder", "model_args": {"layers": layers, "dim": dim},
        "requests": f"{serve}:encoder_requests", "requests_args": {"length": 64}, "threads": 1},
        "load": {"mode": "open", "rate_per_s": 20}, "measure": {"warmup_requests": 20, "requests": 200},
        "search": {"objective": "capacity"}, "constraints": {"p95_ms": 60}}


def one_run(config: Path, code: Path) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "advisor.cli", "diagnose", str(config)], cwd=config.parent,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(code)}, timeout=900)
    output = done.stdout + done.stderr
    found = re.search(r"serves ([\d,]+) requests/s within .*?\((\d+) rates? replayed\).*?, ([\d.]+) s\n", output)
    service = re.search(r"service time p50 ([\d.]+) ms", output)
    return {"exit": done.returncode, "capacity_per_s": float(found.group(1).replace(",", "")) if found else None,
            "rates": int(found.group(2)) if found else None, "run_s": float(found.group(3)) if found else None,
            "service_ms": float(service.group(1)) if service else None, "wall_s": round(time.perf_counter() - started, 1),
            **({"said": output.strip().splitlines()[-1]} if not found else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--dim", type=int, default=320)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--code", default=str(ROOT), help="the checkout whose advisor runs (default: this one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "capacity.yaml"
        config.write_text(json.dumps(config_text(args.layers, args.dim)))
        for _ in range(args.runs):
            print(json.dumps(one_run(config, Path(args.code).resolve())), flush=True)


if __name__ == "__main__":
    main()
