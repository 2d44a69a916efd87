"""advisor beside the closest public peer (loadtune) on one training job, both re-measured apart
from either tool.

    python -m experiments.peer --peer VENV/bin/loadtune [--config configs/quickstart.yaml] [--rounds 5] [--logs DIR]

The peer installs into a venv of its own (`python3 -m venv VENV && VENV/bin/pip install
torch==2.13.0 loadtune`). For a training config of builders (`module.py:callable` model and
dataset, an optimizer by name, cross-entropy loss), in an empty folder each:
1. the peer's `tune` with its defaults, on a workload file written from the config (the same
   dataset, model, optimizer and batch size), timed; its pick is its own rule's (the fewest
   workers within 2% of its fastest trial), its knobs mapped to advisor's plan keys;
2. `advisor optimize` of a copy of the config with its defaults, timed; its verified #1;
3. the baseline and both plans in the plain loop (`experiments/plain_loop.py`), each run a fresh
   process, `--rounds` rounds, the order rotating round by round.
Prints one row a tool: its wall time, what it claimed, the plain loop's speedup with its 95%
interval, and the two plans' ratio. `--logs`: advisor's session output, report.md and recommendations.json kept
there (its pick is the session's to explain).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import yaml

from experiments import copied_with_its_code
from experiments.reproduce import plain_run

ROOT = Path(__file__).resolve().parents[1]

WORKLOAD = '''import torch
from loadtune.workload import Workload
from {model_module} import {model_name}
from {dataset_module} import {dataset_name}


def train_step(model, optimizer, batch, device):
    x, y = (t.to(device) for t in batch)
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def get_workload():
    return Workload(name={name!r}, make_dataset=lambda: {dataset_name}(**{dataset_args!r}),
                    make_model=lambda: {model_name}(**{model_args!r}), train_step=train_step,
                    make_optimizer=lambda model: torch.optim.{optimizer}(model.parameters(), **{optimizer_args!r}),
                    default_batch_size={batch_size})
'''


def peer_workload(config: dict) -> str:
    """The peer's workload file for a config of builders (its modules copied beside it)."""
    workload = config["workload"]
    (model_file, model_name), (dataset_file, dataset_name) = (workload[key].rsplit(":", 1) for key in ("model", "dataset"))
    optimizer = dict(workload.get("optimizer") or {"name": "SGD", "lr": 0.01})
    return WORKLOAD.format(model_module=Path(model_file).stem, model_name=model_name, dataset_module=Path(dataset_file).stem,
                           dataset_name=dataset_name, name=config["name"], dataset_args=workload.get("dataset_args") or {},
                           model_args=workload.get("model_args") or {}, optimizer=optimizer.pop("name"),
                           optimizer_args=optimizer, batch_size=workload["batch_size"])


def peer_pick(raw: dict) -> dict:
    """The peer's own rule over its trials: the fewest workers within 2% of the fastest; its
    baseline where it proposed none ("baseline looks fine") or none ran."""
    ok = [t for t in raw["trials"] if t["result"] and not t["result"].get("error")]
    if not ok:
        return {**raw["baseline"]["knobs"], "claimed": 1.0}
    top = max(t["result"]["throughput"] for t in ok)
    contenders = [t for t in ok if t["result"]["throughput"] >= 0.98 * top]
    best = min(contenders, key=lambda t: (t["knobs"]["num_workers"], -t["result"]["throughput"]))
    return {**best["knobs"], "claimed": best["result"]["throughput"] / raw["baseline"]["throughput"]}


def as_plan(knobs: dict) -> dict:
    """The peer's knobs as advisor's plan keys (what the plain loop applies); batch size and
    pinned memory (a no-op on a CPU) left as they are."""
    plan = {"dataloader.num_workers": knobs["num_workers"]}
    if knobs["num_workers"]:
        plan.update({"dataloader.persistent_workers": bool(knobs["persistent_workers"]),
                     "dataloader.prefetch_factor": knobs["prefetch_factor"]})
    if knobs.get("num_threads"):
        plan["threads.intra_op"] = knobs["num_threads"]
    if knobs.get("amp"):
        plan["amp.dtype"] = "bfloat16"
    if knobs.get("compile"):
        plan["compile.mode"] = "default"
    return plan


def run_peer(peer: str, config: Path) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory(prefix="peer-") as folder:
        path = copied_with_its_code(config, Path(folder))
        (Path(folder) / "workload.py").write_text(peer_workload(yaml.safe_load(path.read_text())))
        started = time.perf_counter()
        done = subprocess.run([peer, "tune", "workload.py", "--save-raw", "raw.json", "--no-plots"], cwd=folder,
                              capture_output=True, text=True)
        if done.returncode != 0:
            said = (done.stdout + done.stderr).strip().splitlines()
            raise SystemExit(f"the peer's tune failed (exit {done.returncode}): {said[-1] if said else 'no output'}")
        return time.perf_counter() - started, peer_pick(json.loads((Path(folder) / "raw.json").read_text()))


def run_advisor(config: Path, logs: Optional[Path] = None) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory(prefix="advisor-") as folder:
        path = copied_with_its_code(config, Path(folder))
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "advisor.cli", "optimize", path.name], cwd=folder,
                              capture_output=True, text=True, check=True)
        wall = time.perf_counter() - started
        results = Path(re.search(r"results: (\S+)", done.stdout).group(1))
        if logs:
            logs.mkdir(parents=True, exist_ok=True)
            (logs / "advisor.log").write_text(done.stdout + done.stderr)
            for name in ("report.md", "recommendations.json"):
                shutil.copyfile(results / name, logs / name)
        payload = json.loads((results / "recommendations.json").read_text())
        top = next(r for r in payload["recommendations"] if r["verified"])
        return wall, {"plan": top["plan"], "changes": top["changes"], "claimed": top["speedup"]}


def interleaved(config: Path, plans: dict[str, dict], rounds: int) -> dict[str, list[float]]:
    """Each plan's ratios to the baseline of its round, the order of the runs rotating."""
    names = ["baseline", *plans]
    ratios: dict[str, list[float]] = {name: [] for name in plans}
    with tempfile.TemporaryDirectory() as folder:
        files = {name: Path(folder) / f"{index}.json" for index, name in enumerate(names)}
        for name, file in files.items():
            file.write_text(json.dumps(plans.get(name, {})))
        for index in range(rounds):
            order = names[index % len(names):] + names[:index % len(names)]
            rates = {name: plain_run(config, files[name]) for name in order}
            for name in plans:
                ratios[name].append(rates[name] / rates["baseline"])
            print(f"  round {index + 1}: " + ", ".join(f"{name} {rate:,.0f}/s" for name, rate in rates.items()), flush=True)
    return ratios


def main() -> None:
    from advisor.verdict import paired_interval

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, help="the peer's command, in its own venv")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "quickstart.yaml")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--logs", type=Path, help="keep advisor's session output and report here")
    args = parser.parse_args()
    config = args.config.resolve()
    peer_s, knobs = run_peer(args.peer, config)
    peer_plan = as_plan(knobs)
    print(f"peer: {peer_s:.0f} s, its pick {peer_plan}, claimed {knobs['claimed']:.2f}x", flush=True)
    advisor_s, top = run_advisor(config, args.logs)
    print(f"advisor: {advisor_s:.0f} s, its verified #1 {top['changes']}, claimed {top['claimed']:.2f}x", flush=True)
    ratios = interleaved(config, {"peer": peer_plan, "advisor": top["plan"]}, args.rounds)
    print(f"{'tool':<10}{'wall s':>8}{'claimed':>9}{'plain loop (95%)':>26}")
    for name, wall, claimed in (("peer", peer_s, knobs["claimed"]), ("advisor", advisor_s, top["claimed"])):
        speedup, low, high = paired_interval(ratios[name])
        print(f"{name:<10}{wall:>8.0f}{claimed:>8.2f}x{speedup:>12.2f}x ({low:.2f}-{high:.2f}x)")
    between = paired_interval([a / p for a, p in zip(ratios["advisor"], ratios["peer"])])
    print(f"advisor / peer in the plain loop: {between[0]:.2f}x ({between[1]:.2f}-{between[2]:.2f}x); "
          f"wall time advisor / peer {advisor_s / peer_s:.1f}x")


if __name__ == "__main__":
    main()
