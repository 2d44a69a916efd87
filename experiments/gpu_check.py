"""The device check: `advisor optimize` end to end on three GPU-sized reference jobs, each
verdict re-measured by a plain loop written apart from advisor, written to docs/gpu.md.

    python -m experiments.gpu_check [--device cpu] [--out docs/gpu.md] [--rounds 3] [NAME ...]

The jobs (configs/gpu_*.yaml): an image model whose samples are decoded and augmented on the CPU
(the GPU starves), an fp32 transformer encoder large enough for tensor cores (compute-bound), and
the same kind of encoder served one request at a time. Each runs as a user runs it, `python -m
advisor optimize CONFIG`, in a fresh process; then its verified #1 is replayed against the
default in the plain loop (experiments/plain_loop.py, experiments/plain_service.py), rounds
interleaved, and the two speedups are compared (the bar is 10%).

`--device cpu` rehearses the same path on the CPU at small sizes (CUDA calls aside), so the one
run a scarce GPU allows is right the first time. Each job's row is written as soon as it ends
(`<out>.json` beside the page), and the page is written again after each job: a check cut off
midway keeps what it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import yaml

from experiments import config_path

ROOT = Path(__file__).resolve().parent.parent
JOBS = {  # the compute-bound job first: the GPU-only fixes are its to find
    "gpu_transformer": ("train", "an fp32 transformer encoder (1024 wide, 6 layers, 256 tokens) trained with AdamW"),
    "gpu_images": ("train", "a residual CNN on 64x64 images decoded and augmented on the CPU, in the training process"),
    "gpu_service": ("infer", "an fp32 transformer encoder (1024 wide, 6 layers, 512 tokens) served one request at a time"),
}
# The same jobs, small enough for a CPU rehearsal.
CPU_SIZES = {
    "gpu_images": {"model_args": {"width": 16, "blocks": 2}, "dataset_args": {"n": 1024, "size": 32, "passes": 2},
                   "batch_size": 32},
    "gpu_transformer": {"model_args": {"dim": 64, "layers": 2, "heads": 4}, "dataset_args": {"n": 512, "length": 32},
                        "batch_size": 16},
    "gpu_service": {"model_args": {"vocab": 2000, "dim": 64, "layers": 2},
                    "requests_args": {"n": 32, "length": 32, "vocab": 2000}},
}
BAR = 0.10  # the plain loop's speedup within 10% of the claim
JOB_TIMEOUT_S = 200
CHECK_S = 470  # the whole check, on one GPU: a job that could not finish before it is not started
MIN_JOB_S = 90  # the least a job's diagnosis, search and verification take there
PLAIN_TIMEOUT_S = 120


def job_config(name: str, device: str, folder: Path) -> Path:
    """The job's config, written into `folder` with its code paths made absolute; on the CPU at
    its small sizes, with the search's budget halved."""
    config = yaml.safe_load(config_path(name).read_text())
    workload = config["workload"]
    for key in ("model", "dataset", "requests"):
        if key in workload:
            workload[key] = str((config_path(name).parent / workload[key]).resolve())
    if device == "cpu":
        workload["device"] = "cpu"
        for key, value in CPU_SIZES[name].items():
            workload[key] = {**workload.get(key, {}), **value} if isinstance(value, dict) else value
        config["search"] = {**config.get("search", {}), "time_budget_s": config["search"]["time_budget_s"] / 2}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def optimize(config: Path, results: Path, evidence: Path, limit_s: float) -> tuple[Optional[dict], str, float]:
    """`advisor diagnose --json` (its evidence kept in `evidence`: the recorded readings the
    tests replay), then `advisor optimize --evidence` on it, as a user runs them, their progress
    on this terminal; the payload, the report's text, the seconds. No payload where either
    failed (the reason in the report's place)."""
    started = time.time()
    advisor = [sys.executable, "-m", "advisor"]
    try:
        with evidence.open("w") as handle:
            diagnosed = subprocess.run([*advisor, "diagnose", str(config), "--json"], cwd=ROOT, stdout=handle,
                                       timeout=limit_s)
        if diagnosed.returncode != 0:
            return None, f"advisor diagnose exited {diagnosed.returncode}", time.time() - started
        done = subprocess.run([*advisor, "optimize", str(config), "--fresh", "--evidence", str(evidence),
                               "--results", str(results)], cwd=ROOT, timeout=limit_s - (time.time() - started),
                              stdout=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"advisor ran past the {limit_s:.0f} s the check left it", time.time() - started
    spent = time.time() - started
    found = sorted(results.rglob("recommendations.json"))
    if done.returncode != 0 or not found:
        return None, f"advisor optimize exited {done.returncode}", spent
    report = found[-1].with_name("report.md")
    return json.loads(found[-1].read_text()), report.read_text() if report.exists() else "", spent


def plain_run(kind: str, config: Path, plan_file: Path) -> dict:
    """One run of the plain loop (training) or the plain service (inference), a fresh process."""
    module = "experiments.plain_loop" if kind == "train" else "experiments.plain_service"
    output = subprocess.run([sys.executable, "-m", module, str(config), str(plan_file)], cwd=ROOT, capture_output=True,
                            text=True, timeout=PLAIN_TIMEOUT_S)
    if output.returncode != 0:
        raise RuntimeError(f"{module} failed: {output.stderr.strip().splitlines()[-1:]}")
    return json.loads(output.stdout.strip().splitlines()[-1])


def speedup_of(kind: str, plan_result: dict, base_result: dict) -> float:
    """A training plan's rate over the default's; a service's default p95 over the plan's."""
    if kind == "train":
        return plan_result["samples_per_s"] / base_result["samples_per_s"]
    return base_result["p95_ms"] / plan_result["p95_ms"]


def replay(kind: str, config: Path, plan: dict, rounds: int, folder: Path) -> dict:
    """The plan against the default in the plain loop, `rounds` interleaved pairs (the order
    alternating): the geometric-mean speedup and its 95% interval."""
    from advisor.verdict import paired_interval

    base_file, plan_file = folder / "default.json", folder / "plan.json"
    base_file.write_text("{}")
    plan_file.write_text(json.dumps(plan))
    ratios = []
    for index in range(rounds):
        if index % 2 == 0:
            base = plain_run(kind, config, base_file)
            fixed = plain_run(kind, config, plan_file)
        else:
            fixed = plain_run(kind, config, plan_file)
            base = plain_run(kind, config, base_file)
        ratios.append(speedup_of(kind, fixed, base))
        print(f"  plain round {index + 1}/{rounds}: {ratios[-1]:.2f}x", flush=True)
    speedup, low, high = paired_interval(ratios)
    return {"speedup": speedup, "interval": [low, high], "rounds": rounds, "ratios": ratios}


def diagnosis_lines(report: str, most: int = 40) -> list[str]:
    """The report's account of the baseline, as the terminal showed it: throughput, resources,
    where the GPU's step goes, the larger-batch advice, the diagnoses and the top operators."""
    text = report.split("## Recommendations")[0] if report else ""
    return [line for line in text.splitlines()
            if line.strip() and not line.startswith(("#", "```", "Session of"))][:most]


def check_job(name: str, device: str, rounds: int, folder: Path, evidence: Path, limit_s: float) -> dict:
    kind, about = JOBS[name]
    print(f"== {name}: {about}", flush=True)
    config = job_config(name, device, folder)
    payload, report, spent = optimize(config, folder / f"{name}-results", evidence, limit_s)
    row = {"job": name, "about": about, "kind": kind, "session_s": spent}
    if payload is None:
        return {**row, "failed": report}
    row.update(
        diagnoses=[d["summary"] for d in payload["diagnoses"]],
        report=diagnosis_lines(report),
        tried=payload["recipes_tried"],
        skipped=payload["recipes_skipped"],
        gpu=payload["baseline"]["measurement"].get("gpu", {}),
        device_timing=payload["baseline"]["measurement"].get("device_timing", {}),
        unit=payload["unit"],
        first_verified_s=payload.get("first_verified_s"),
    )
    verified = [r for r in payload["recommendations"] if r["verified"]]
    if not verified:
        top = payload["recommendations"][0] if payload["recommendations"] else None
        return {**row, "top": top and {"changes": top["changes"], "speedup": top["speedup"], "interval": top["interval"],
                                        "reason": top["reason"]}}
    top = verified[0]
    row["claim"] = {"changes": top["changes"], "recipes": top["recipes"], "speedup": top["speedup"],
                    "interval": top["interval"], "rounds": top.get("rounds"), "numerics": top.get("numerics", {}),
                    "basis": top.get("speedup_basis")}
    try:
        plain = replay(kind, config, top["plan"], rounds, folder)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return {**row, "plain": {"failed": str(exc)[:300]}}
    row["plain"] = {**plain, "error": plain["speedup"] / top["speedup"] - 1}
    return row


def machine(device: str) -> dict:
    """The device's name, driver, torch and CUDA versions, and the date."""
    import torch

    found = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "cuda": torch.version.cuda,
             "python": sys.version.split()[0], "cpus": os.cpu_count()}
    if device == "cuda" and torch.cuda.is_available():
        found["device"] = torch.cuda.get_device_name(0)
        try:
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            found["driver"] = driver.decode() if isinstance(driver, bytes) else driver
        except Exception as exc:  # the page says what could not be read
            found["driver"] = f"unread ({type(exc).__name__})"
    else:
        found["device"] = "CPU rehearsal (--device cpu): the GPU path at small sizes, CUDA calls aside"
    return found


def times(value: float) -> str:
    return f"{value:.2f}x"


def changes_text(changes: dict) -> str:
    return ", ".join(f"{key}={value}" for key, value in changes.items())


def page(rows: list[dict], found: dict) -> str:
    lines = ["# advisor on a GPU: the device check", "",
             f"`python -m experiments.gpu_check` on {found['device']}, {found['date']}: driver {found.get('driver', '-')}, "
             f"torch {found['torch']} (CUDA {found['cuda']}), Python {found['python']}, {found['cpus']} CPU cores.", "",
             "Each job ran as a user runs it (`advisor optimize CONFIG`, a fresh process, its search and verification "
             "budgets as its config sets them); its verified #1 was then replayed against the default in a plain loop "
             "written apart from advisor (experiments/plain_loop.py, experiments/plain_service.py), rounds interleaved. "
             f"The bar: the plain loop's speedup within {BAR:.0%} of the claim.", "",
             "| job | diagnosis | verified #1 | claimed (95% interval) | plain loop | error | within 10% |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        diagnosis = row.get("diagnoses", ["-"])[0] if row.get("diagnoses") else row.get("failed", "-")
        claim, plain = row.get("claim"), row.get("plain", {})
        if claim is None:
            top = row.get("top")
            lines.append(f"| {row['job']} | {diagnosis} | none verified" + (f" (best {changes_text(top['changes'])}: "
                         f"{top['reason']})" if top else "") + " | - | - | - | - |")
            continue
        low, high = claim["interval"]
        replayed = (f"{times(plain['speedup'])} ({times(plain['interval'][0])}-{times(plain['interval'][1])}, "
                    f"{plain['rounds']} rounds)" if "speedup" in plain else plain.get("failed", "-"))
        error = f"{plain['error']:+.1%}" if "error" in plain else "-"
        within = ("yes" if abs(plain["error"]) <= BAR else "NO") if "error" in plain else "-"
        lines.append(f"| {row['job']} | {diagnosis} | {changes_text(claim['changes'])} | {times(claim['speedup'])} "
                     f"({times(low)}-{times(high)}) | {replayed} | {error} | {within} |")
    for row in rows:
        lines += ["", f"## {row['job']}: {row['about']}", ""]
        if row.get("failed"):
            lines.append(f"The session failed: {row['failed']}.")
            continue
        lines += ["```", *row.get("report", []), "```", ""]
        lines.append(f"Tried: {', '.join(row['tried'])}. Not tried: "
                     + "; ".join(f"{name} ({why})" for name, why in row["skipped"].items()) + ".")
        timing = row.get("device_timing") or {}
        if timing:
            lines.append(f"The baseline's step compute on CUDA events: {timing['compute_ms_mean']:.2f} ms "
                         f"({timing['steps']} steps).")
        first = row.get("first_verified_s")
        lines.append(f"The session took {row['session_s']:.0f} s" + (f", its first verified fix {first:.0f} s after the "
                                                                      "start." if first else "."))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"jobs to check (default: all of {', '.join(JOBS)})")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "gpu.md")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--check-s", type=float, default=CHECK_S, help="the whole check's time (default %(default)s)")
    args = parser.parse_args()
    unknown = [name for name in args.names if name not in JOBS]
    if unknown:
        parser.error(f"unknown job {unknown[0]!r}; the jobs are {', '.join(JOBS)}")
    args.names = args.names or list(JOBS)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            sys.exit("gpu_check: no CUDA device is visible; rehearse with --device cpu")
    found, rows, started = machine(args.device), [], time.time()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        for name in args.names:
            folder = Path(scratch) / name
            folder.mkdir()
            evidence = args.out.with_name(f"{args.out.stem}-{name}-evidence.json")
            left_s = args.check_s - (time.time() - started)
            if left_s < MIN_JOB_S:
                rows.append({"job": name, "about": JOBS[name][1], "session_s": 0.0,
                             "failed": f"not run: {left_s:.0f} s of the check's {args.check_s:.0f} s were left"})
            else:
                rows.append(check_job(name, args.device, args.rounds, folder, evidence, min(JOB_TIMEOUT_S, left_s)))
            args.out.with_suffix(".json").write_text(json.dumps({"machine": found, "rows": rows}, indent=2, default=str))
            args.out.write_text(page(rows, found))
            print(f"== {name} written to {args.out}", flush=True)


if __name__ == "__main__":
    main()
