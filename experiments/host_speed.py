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
import tempfile
import threading
import time
from pathlib import Path

from experiments.reproduce import plain_run

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


def timed_plain_run(config: Path, plan_file: Path) -> tuple[float, float, float]:
    """(rate, start, end) of one plain-loop run of the plan in `plan_file`."""
    start = time.time()
    rate = plain_run(config, plan_file)
    return rate, start, time.time()


def adjusted_spread(log_ratios: list[float], covariate: list[float]) -> float:
    """The log speedup's standard deviation after removing its regression on a round's covariate."""
    slope = statistics.linear_regression(covariate, log_ratios).slope
    mean = statistics.fmean(covariate)
    return statistics.stdev([r - slope * (c - mean) for r, c in zip(log_ratios, covariate)])


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
    with tempfile.TemporaryDirectory() as folder:
        files = {name: Path(folder) / f"{name}.json" for name in arms}
        for name, file in files.items():
            file.write_text(json.dumps(arms[name]))
        for index in range(args.rounds):
            for name in (list(arms) if index % 2 == 0 else list(reversed(arms))):
                rate, start, end = timed_plain_run(config, files[name])
                runs[name].append((rate, probe.between(start, end)))
            print(f"round {index + 1}: " + ", ".join(f"{name} {runs[name][-1][0]:,.0f}/s (probe {runs[name][-1][1] * 1000:.2f} ms)"
                                                   for name in arms), flush=True)
    probe.stop()
    for name, measured in runs.items():
        speed, rate = [-math.log(p) for _, p in measured], [math.log(r) for r, _ in measured]
        print(f"{name}: log rate on log probe speed: slope {statistics.linear_regression(speed, rate).slope:.2f}, "
              f"correlation {statistics.correlation(speed, rate):.2f}")
    log_ratios = [math.log(p / b) for (p, _), (b, _) in zip(runs["plan"], runs["baseline"])]
    probe_diffs = [math.log(bp / pp) for (_, pp), (_, bp) in zip(runs["plan"], runs["baseline"])]
    plan_speed = [-math.log(pp) for _, pp in runs["plan"]]
    print(f"per-round log speedup: sd {statistics.stdev(log_ratios):.3f}; adjusted for the probe difference "
          f"{adjusted_spread(log_ratios, probe_diffs):.3f}; for the plan's probe alone {adjusted_spread(log_ratios, plan_speed):.3f}")


if __name__ == "__main__":
    main()
