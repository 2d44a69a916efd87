"""Does the machine's own core speed move under a verification, and does a plan's rate follow it?

    python -m experiments.host_speed CONFIG PLAN_JSON [--rounds 16] [--probe-only SECONDS]

A cloud machine's cores can slow down with nothing else running on it (another tenant on the
host's sibling threads, the host's clock): the guest sees no steal and no other process, only
slower work. This experiment times a fixed unit of pure-Python work (about 2 ms, every 100 ms) in
this process while the plain loop (experiments/plain_loop.py) runs the baseline and the plan,
interleaved, `--rounds` rounds. Per run it prints the rate and the probe's speed over the run
(1.0: the fastest probe seen); then per arm how its log rate follows the log probe speed (the
slope and correlation), and the per-round log speedup's spread before and after adjusting each
round for the probe (a regression on the rounds' probe difference, as a covariate adjustment
does). `--probe-only` times the probe alone, in 10 s buckets, on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE_EVERY_S = 0.1


def probe_unit() -> float:
    """Seconds one fixed unit of pure-Python work takes now."""
    started, total = time.perf_counter(), 0
    for i in range(40_000):
        total += i * i
    return time.perf_counter() - started


class Probe:
    """Times `probe_unit` every PROBE_EVERY_S on a thread of its own, keeping (time, seconds)."""

    def __init__(self) -> None:
        self.readings: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(PROBE_EVERY_S):
            self.readings.append((time.time(), probe_unit()))

    def between(self, start: float, end: float) -> float:
        """The probe's median seconds between two times."""
        inside = [s for t, s in self.readings if start <= t <= end]
        return statistics.median(inside) if inside else float("nan")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def plain_run(config: Path, plan: dict) -> tuple[float, float, float]:
    """(rate, start, end) of one plain-loop run of `plan`."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(plan, handle)
    start = time.time()
    done = subprocess.run([sys.executable, "-m", "experiments.plain_loop", str(config), handle.name],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    end = time.time()
    Path(handle.name).unlink()
    return json.loads(done.stdout.strip().splitlines()[-1])["samples_per_s"], start, end


def slope_and_correlation(xs: list[float], ys: list[float]) -> tuple[float, float]:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return 0.0, 0.0
    return sxy / sxx, sxy / math.sqrt(sxx * syy)


def adjusted_spread(log_ratios: list[float], probe_diffs: list[float]) -> float:
    """The log speedup's standard deviation after removing its regression on the rounds' probe difference."""
    slope, _ = slope_and_correlation(probe_diffs, log_ratios)
    mean_diff = statistics.fmean(probe_diffs)
    return statistics.stdev([r - slope * (d - mean_diff) for r, d in zip(log_ratios, probe_diffs)])


def probe_only(seconds: float) -> None:
    probe = Probe()
    time.sleep(seconds)
    probe.stop()
    start = probe.readings[0][0]
    buckets: dict[int, list[float]] = {}
    for t, s in probe.readings:
        buckets.setdefault(int((t - start) // 10), []).append(s)
    print("probe ms, median per 10 s: " + " ".join(f"{statistics.median(v) * 1000:.2f}" for _, v in sorted(buckets.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?")
    parser.add_argument("plan", nargs="?", help="the plan, as JSON")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--probe-only", type=float, default=0.0)
    args = parser.parse_args()
    if args.probe_only:
        probe_only(args.probe_only)
        return
    config, arms = Path(args.config).resolve(), {"baseline": {}, "plan": json.loads(args.plan)}
    probe, runs = Probe(), {name: [] for name in arms}
    for index in range(args.rounds):
        order = list(arms) if index % 2 == 0 else list(reversed(arms))
        for name in order:
            rate, start, end = plain_run(config, arms[name])
            runs[name].append((rate, probe.between(start, end)))
        print(f"round {index + 1}: " + ", ".join(f"{name} {runs[name][-1][0]:,.0f}/s (probe {runs[name][-1][1] * 1000:.2f} ms)"
                                               for name in arms), flush=True)
    probe.stop()
    for name, measured in runs.items():
        slope, corr = slope_and_correlation([-math.log(p) for _, p in measured], [math.log(r) for r, _ in measured])
        print(f"{name}: log rate on log probe speed: slope {slope:.2f}, correlation {corr:.2f}")
    log_ratios = [math.log(p / b) for (p, _), (b, _) in zip(runs["plan"], runs["baseline"])]
    probe_diffs = [math.log(bp / pp) for (_, pp), (_, bp) in zip(runs["plan"], runs["baseline"])]
    plan_speed = [-math.log(pp) for _, pp in runs["plan"]]
    print(f"per-round log speedup: sd {statistics.stdev(log_ratios):.3f}; adjusted for the probe difference "
          f"{adjusted_spread(log_ratios, probe_diffs):.3f}; for the plan's probe alone {adjusted_spread(log_ratios, plan_speed):.3f}")


if __name__ == "__main__":
    main()
