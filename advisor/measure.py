"""Measurements: step-time statistics, process-tree memory and CPU, GPU sampling.

The parent samples the child's process tree (DataLoader workers included) from outside, so
the timing inside the child is not perturbed by the sampling.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import psutil

MB = 1024 * 1024


@dataclass(frozen=True)
class Measurement:
    """One run of a workload under a plan, in one child process."""

    mode: str
    plan: dict
    status: str  # "ok" or "failed"
    reason: str = ""
    device: str = ""
    samples: int = 0
    samples_per_s: float = 0.0
    step_ms_mean: float = 0.0
    step_ms_p50: float = 0.0
    step_ms_p95: float = 0.0
    data_wait_share: float = 0.0
    transfer_share: float = 0.0
    peak_memory_mb: float = 0.0
    memory_source: str = ""
    cpu_util: float = 0.0
    gpu: dict = field(default_factory=dict)
    losses: tuple = ()
    setup_s: float = 0.0
    wall_s: float = 0.0
    sample_probe: dict = field(default_factory=dict)
    operators: dict = field(default_factory=dict)
    warmup_ms: tuple = ()
    environment: dict = field(default_factory=dict)
    stages: dict = field(default_factory=dict)  # pipelines: wall and CPU seconds per stage
    hotspots: dict = field(default_factory=dict)  # pipelines: transform time by the user's source line
    output: dict = field(default_factory=dict)  # pipelines: where the output frame was kept, its shape

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Measurement":
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["losses"] = tuple(values.get("losses", ()))
        values["warmup_ms"] = tuple(values.get("warmup_ms", ()))
        return cls(**values)

    @classmethod
    def failed(cls, mode: str, plan: dict, reason: str, **extra: Any) -> "Measurement":
        return cls(mode=mode, plan=plan, status="failed", reason=reason, **extra)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def step_statistics(step_s: list[float], wait_s: list[float], transfer_s: list[float], samples: int) -> dict:
    """Throughput and step-time summary over the timed steps."""
    total = sum(step_s)
    if total <= 0:
        return {"samples": samples}
    return {
        "samples": samples,
        "samples_per_s": samples / total,
        "step_ms_mean": 1000 * statistics.fmean(step_s),
        "step_ms_p50": 1000 * percentile(step_s, 50),
        "step_ms_p95": 1000 * percentile(step_s, 95),
        "data_wait_share": sum(wait_s) / total,
        "transfer_share": sum(transfer_s) / total,
    }


def process_tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants (DataLoader workers are children of the trainer)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tree_rss_mb(pid: int) -> float:
    total = 0
    for proc in process_tree(pid):
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total / MB


def descendants_cpu_seconds(pid: int) -> float:
    """CPU time of the processes a process started (its DataLoader workers)."""
    total = 0.0
    for proc in process_tree(pid)[1:]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def kill_tree(pid: int) -> None:
    """Kills a child started in its own session, with every process it started."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for proc in process_tree(pid):
        try:
            proc.kill()
        except psutil.Error:
            pass


def default_memory_limit_mb() -> float:
    """A child whose tree passes this is killed before it takes the machine down."""
    return 0.9 * psutil.virtual_memory().total / MB


class ResourceSampler:
    """Samples a child's process-tree RSS (and the GPU, when there is one) from a thread.

    Kills the tree when its RSS passes `memory_limit_mb`, and says so in `killed_reason`. Every
    sample walks /proc, and on a 2-core machine each wake-up can stall a 2-thread OpenMP region
    of the child: at 50 ms it slowed a compute-bound baseline measurably, so it samples at 200 ms.
    """

    def __init__(self, pid: int, memory_limit_mb: Optional[float] = None, interval_s: float = 0.2):
        self.pid = pid
        self.memory_limit_mb = memory_limit_mb or default_memory_limit_mb()
        self.interval_s = interval_s
        self.peak_rss_mb = 0.0
        self.gpu_samples: list[tuple[float, float, float]] = []  # (time, util %, memory MB)
        self.killed_reason = ""
        self._gpu = GpuProbe()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "ResourceSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = tree_rss_mb(self.pid)
            self.peak_rss_mb = max(self.peak_rss_mb, rss)
            if rss > self.memory_limit_mb and not self.killed_reason:
                self.killed_reason = (
                    f"out of memory: the process tree reached {rss:.0f} MB, over the {self.memory_limit_mb:.0f} MB limit"
                )
                kill_tree(self.pid)
            if self._gpu.available:
                self.gpu_samples.append((time.time(), *self._gpu.sample()))
            self._stop.wait(self.interval_s)

    def gpu_summary(self, window: Optional[tuple[float, float]] = None) -> dict:
        """GPU utilisation and memory over the timed window, or why there is none."""
        if not self._gpu.available:
            return {"available": False, "note": self._gpu.note}
        samples = [s for s in self.gpu_samples if window is None or window[0] <= s[0] <= window[1]]
        samples = samples or self.gpu_samples
        if not samples:
            return {"available": True, "name": self._gpu.name, "note": "no samples taken"}
        return {
            "available": True,
            "name": self._gpu.name,
            "util_mean": statistics.fmean(s[1] for s in samples),
            "memory_mb_peak": max(s[2] for s in samples),
            "memory_mb_total": self._gpu.total_mb,
            "note": f"{len(samples)} NVML samples",
        }


class GpuProbe:
    """NVIDIA GPU 0 through pynvml, or a clean note saying why there is none."""

    def __init__(self) -> None:
        self.available = False
        self.name = ""
        self.total_mb = 0.0
        self.note = ""
        try:
            import pynvml

            pynvml.nvmlInit()
            if pynvml.nvmlDeviceGetCount() == 0:
                self.note = "no GPU: NVML found no devices"
                return
            self._pynvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            name = pynvml.nvmlDeviceGetName(self._handle)
            self.name = name.decode() if isinstance(name, bytes) else name
            self.total_mb = pynvml.nvmlDeviceGetMemoryInfo(self._handle).total / MB
            self.available = True
        except Exception as exc:  # no driver, no library: the common case on a CPU machine
            self.note = f"no GPU: {type(exc).__name__}: {exc}".strip()

    def sample(self) -> tuple[float, float]:
        rates = self._pynvml.nvmlDeviceGetUtilizationRates(self._handle)
        memory = self._pynvml.nvmlDeviceGetMemoryInfo(self._handle)
        return float(rates.gpu), memory.used / MB
