"""Measurements: step-time statistics, process-tree memory and CPU, GPU sampling.

The parent samples the child's process tree (DataLoader workers included) from outside, so
the timing inside the child is not perturbed by the sampling.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

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
    other_cpu_share: float = 0.0  # the machine's CPU taken by other processes during the timed window
    gpu: dict = field(default_factory=dict)  # NVML's readings over the timed window (`GpuProbe`)
    device_timing: dict = field(default_factory=dict)  # CUDA: each step's compute on the device's own clock
    losses: tuple = ()
    parameters: tuple = ()  # training: per-tensor parameter checksums after the configured steps
    setup_s: float = 0.0
    wall_s: float = 0.0
    sample_probe: dict = field(default_factory=dict)
    operators: dict = field(default_factory=dict)
    warmup_ms: tuple = ()
    environment: dict = field(default_factory=dict)
    stages: dict = field(default_factory=dict)  # pipelines: wall and CPU seconds per stage
    hotspots: dict = field(default_factory=dict)  # pipelines: transform time by the user's source line
    output: dict = field(default_factory=dict)  # pipelines: where the output frame was kept, its shape
    memory: dict = field(default_factory=dict)  # the memory readings behind peak_memory_mb, and the method
    latency: dict = field(default_factory=dict)  # inference: percentiles, cold start, throughput, queueing
    communication: dict = field(default_factory=dict)  # data-parallel: ranks, bytes all-reduced per step, bandwidth
    # "fresh": a new interpreter; "forked": from the session's template process; "template": from its round's own
    # template (`advisor.harness.templates`); "kept": a fresh one's later run
    interpreter: str = ""
    epoch: dict = field(default_factory=dict)  # training with workers: an epoch's end, timed, and its share charged
    page_faults_per_step: float = 0.0  # training: the process's minor page faults per timed step (`train.minor_faults`)
    compile_cache: dict = field(default_factory=dict)  # torch.compile's graphs found in its cache ("hits") and compiled ("misses")

    @property
    def compiled_from_cache(self) -> bool:
        """Whether every graph this run compiled came from torch.compile's cache: its warm-up
        paid little of a compile's one-off cost."""
        return bool(self.compile_cache.get("hits")) and not self.compile_cache.get("misses")

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
        values["parameters"] = tuple(tuple(p) for p in values.get("parameters", ()))
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


def epoch_of(runs: list[Measurement]) -> dict:
    """Training with workers: what an epoch's end cost (seconds, averaged over the runs that
    timed one) and the share of each run's time it was charged (`harness.train.epoch_charge`),
    every how many steps it comes, and how many of the charged runs timed it (the others were
    charged what earlier runs of the plan timed: `EpochEnds`); {} where no run was charged one."""
    charged = [r for r in runs if r.ok and r.epoch.get("end_s") is not None and r.samples_per_s > 0]
    if not charged:
        return {}
    timed = [r for r in charged if r.epoch.get("timed", True)]
    ends = [r.epoch["end_s"] for r in timed or charged]  # none timed (its timing runs set aside): what they were charged
    shares = [r.epoch["charged_s"] / (r.samples / r.samples_per_s) for r in charged]
    return {"end_s": sum(ends) / len(ends),
            "steps_per_epoch": charged[-1].epoch["steps_per_epoch"], "charged_share": sum(shares) / len(shares),
            "timed_runs": len(timed), "runs": len(charged)}


def page_faults_mb(faults: float) -> float:
    """The memory `faults` pages stand for, in MB (pages of this machine's size)."""
    return faults * resource.getpagesize() / 2**20


def page_faults_of(runs: list[Measurement]) -> float:
    """Training: the minor page faults a step, averaged over the runs that counted them; 0 where none did."""
    counted = [r.page_faults_per_step for r in runs if r.ok and r.page_faults_per_step]
    return sum(counted) / len(counted) if counted else 0.0


BUSY_SHARE = 0.25  # other processes took this share of the machine's CPU: timings may be distorted
BUSY_MIN_WINDOW_S = 0.5  # a window of at least 50 clock ticks, so that a tick is at most 2% of one core
QUIET_WAIT_S = 30.0  # how long a verification waits for a quiet machine before running a disturbed round again


_observer: Optional[psutil.Process] = None  # the advisor process that started this run and samples it


def watched_by(pid: Optional[int]) -> None:
    """Names the process that started this run and watches it (its memory sampler, its pruner):
    part of the measurement, so its CPU is not another process's."""
    global _observer
    try:
        _observer = psutil.Process(pid) if pid else None
    except psutil.Error:
        _observer = None


def machine_busy_seconds() -> float:
    """CPU seconds every process on the machine has used since boot (/proc/stat's first line),
    less the observer's (`watched_by`): over a short window its sampling would read as load."""
    try:
        with open("/proc/stat") as handle:
            fields = [int(v) for v in handle.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    try:
        observed = _observer.cpu_times() if _observer is not None else None
    except psutil.Error:
        observed = None
    return busy - (observed.user + observed.system if observed else 0.0)


def wait_for_quiet(most_s: float, progress: Callable[[str], None] = lambda line: None, window_s: float = 1.0) -> float:
    """Waits, between runs, until other processes take under BUSY_SHARE of the machine's CPU
    over a window, for `most_s` at most; returns the share they took in the last window."""
    deadline, said, share = time.monotonic() + most_s, False, 1.0
    while True:
        before, start = machine_busy_seconds(), time.monotonic()
        time.sleep(window_s)
        share = other_cpu_share(machine_busy_seconds() - before, 0.0, time.monotonic() - start)
        if share < BUSY_SHARE or time.monotonic() >= deadline:
            return share
        if not said:
            progress(f"  waiting up to {most_s:.0f} s for a quiet machine (other processes take {share:.0%} of the CPU) ...")
            said = True


def taken_again_once_quiet(measure: Callable[[], Measurement], said: Callable[[Measurement], str],
                           progress: Callable[[str], None], quiet_wait_s: float = QUIET_WAIT_S,
                           heard: Callable[[Measurement], None] = lambda run: None) -> Measurement:
    """A run, taken once more after the machine quiets (`wait_for_quiet`) where other processes
    took BUSY_SHARE or more of its CPU (`said` gives the line that says so), the quieter of the
    two kept; a failed run stands as it is. `heard` hears each run taken."""
    run = measure()
    heard(run)
    if not run.ok or run.other_cpu_share < BUSY_SHARE:
        return run
    progress(said(run))
    wait_for_quiet(quiet_wait_s, progress)
    again = measure()
    heard(again)
    return min((run, again), key=lambda taken: (not taken.ok, taken.other_cpu_share))


def other_cpu_share(machine_busy_s: float, own_cpu_s: float, wall_s: float) -> float:
    """The share of the machine's CPU that processes outside the measured tree took in a window;
    0 for a window too short to tell (/proc/stat counts 10 ms ticks: over a 16 ms window of
    2 cores, one tick reads as 31%)."""
    if wall_s < BUSY_MIN_WINDOW_S:
        return 0.0
    return min(1.0, max(0.0, machine_busy_s - own_cpu_s) / (wall_s * (os.cpu_count() or 1)))


def process_tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants (DataLoader workers are children of the trainer)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def status_mb(pid: int, fields: tuple[str, ...]) -> dict[str, float]:
    """Fields of /proc/PID/status given in kB (VmRSS, VmHWM, VmData), in MB; cheap to read."""
    values = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                name, _, rest = line.partition(":")
                if name in fields:
                    values[name] = int(rest.split()[0]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return values


def pss_mb(pid: int) -> float:
    """A process's proportional set size: each shared page split among its sharers. Costs a few
    ms per process (the kernel walks its page tables), so it is read less often than RSS."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


MEMORY_METHOD = "PSS of the process tree (shared pages counted once), or the largest process's high-water mark (VmHWM)"


@dataclass
class TreeMemory:
    """One reading of a process tree's memory, and the peaks over readings."""

    pss_mb: float = 0.0  # summed PSS: forked workers' shared pages counted once in all
    hwm_mb: float = 0.0  # the largest single process's kernel high-water mark: misses no burst
    rss_sum_mb: float = 0.0  # summed RSS, for comparison: shared pages counted once per process

    @property
    def peak_mb(self) -> float:
        return max(self.pss_mb, self.hwm_mb)

    def merge(self, other: "TreeMemory") -> "TreeMemory":
        return TreeMemory(max(self.pss_mb, other.pss_mb), max(self.hwm_mb, other.hwm_mb),
                          max(self.rss_sum_mb, other.rss_sum_mb))

    def to_dict(self) -> dict:
        return {"peak_mb": self.peak_mb, "pss_mb": self.pss_mb, "hwm_mb": self.hwm_mb,
                "rss_sum_mb": self.rss_sum_mb, "method": MEMORY_METHOD}

    @classmethod
    def from_dict(cls, data: dict) -> "TreeMemory":
        return cls(data["pss_mb"], data["hwm_mb"], data["rss_sum_mb"])


def tree_memory(pid: int, with_pss: bool = True) -> TreeMemory:
    """The tree's memory now: high-water marks and RSS always, PSS when asked (it costs more)."""
    pids = [proc.pid for proc in process_tree(pid)]
    status = [status_mb(p, ("VmRSS", "VmHWM")) for p in pids]
    return TreeMemory(
        pss_mb=tree_pss_mb(pid, pids) if with_pss else 0.0,
        hwm_mb=max((s.get("VmHWM", 0.0) for s in status), default=0.0),
        rss_sum_mb=sum(s.get("VmRSS", 0.0) for s in status),
    )


def tree_pss_mb(pid: int, pids: Optional[list[int]] = None) -> float:
    """The tree's summed PSS (each shared page counted once in all)."""
    return sum(pss_mb(p) for p in (pids if pids is not None else [proc.pid for proc in process_tree(pid)]))


def pss_needed(reading: TreeMemory, limit_mb: float) -> bool:
    """Whether only the tree's PSS can tell if it is within `limit_mb`: a process's PSS never
    exceeds its RSS, so a summed RSS under the limit rules the limit out without it."""
    return reading.rss_sum_mb >= limit_mb


DATA_HEADROOM = 4  # RLIMIT_DATA counts address space: allocators (pyarrow's, glibc's arenas) reserve far more than they touch
DATA_HEADROOM_MIN_MB = 1024


def limit_data_segment(budget_mb: float) -> None:
    """The backstop for allocations faster than any sampler: this process (and the workers it
    forks) may grow its data segment by at most DATA_HEADROOM times the budget (1 GB at least),
    so a runaway allocation fails inside the job as an allocation error instead of waking the
    kernel's OOM killer, which may pick another process. The limit is on address space, hence
    the headroom: the sampler and the high-water mark enforce the budget itself. Skipped where a
    CUDA driver is present: it reserves address space that counts."""
    import resource

    if os.path.exists("/dev/nvidiactl"):
        return
    data_mb = status_mb(os.getpid(), ("VmData",)).get("VmData", 0.0)
    limit = int((data_mb + max(DATA_HEADROOM * budget_mb, DATA_HEADROOM_MIN_MB)) * MB)
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


def descendants_cpu_seconds(pid: int) -> float:
    """CPU time of the processes a process started (its DataLoader or Dask workers): those alive,
    with the exited ones each of them reaped (a forkserver's forked workers), and, for this
    process, those that have exited and been reaped (a pool's workers at its close)."""
    total = 0.0
    for proc in process_tree(pid)[1:]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        except psutil.Error:
            pass
    if pid == os.getpid():
        reaped = os.times()
        total += reaped.children_user + reaped.children_system
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
    """Watches a child's process tree from a thread: memory (and the GPU, when there is one).

    Every tick reads each process's RSS and kernel high-water mark (/proc/PID/status, cheap);
    every PSS_EVERY-th tick also the tree's PSS, but only where the summed RSS, which no PSS can
    exceed, does not already rule out the limit (`pss_needed`): the kernel walks each process's
    page tables under its memory map's lock, and the workers' own mappings wait for it. Read every
    second regardless, over 32 rounds of a plan of 4 DataLoader workers, it read 0.85x, 1.04x and
    0.89x of the rate read with PSS as needed, its slowest runs 25% under theirs, while the rate
    with PSS as needed stayed within 1.3% of the plain loop's (`python -m experiments.sampler`).
    The child reads its tree's PSS itself once its timed window is over. The tree is killed as
    soon as a reading passes `memory_limit_mb`, and `killed_reason` says so. Every tick walks
    /proc, and on a 2-core machine each wake-up can stall a 2-thread OpenMP region of the child:
    at 50 ms it slowed a compute-bound baseline measurably, so it ticks at 200 ms; a burst
    between ticks still shows in the high-water mark.
    """

    PSS_EVERY = 5

    def __init__(self, pid: int, memory_limit_mb: Optional[float] = None, interval_s: float = 0.2,
                 budget: bool = False):
        self.pid = pid
        self.memory_limit_mb = memory_limit_mb or default_memory_limit_mb()
        self.budget = budget  # the limit is the user's budget, not the machine's
        self.interval_s = interval_s
        self.memory = TreeMemory()
        self.gpu_samples: list[tuple[float, ...]] = []  # (time, util %, memory MB, PCIe to GPU MB/s, from GPU MB/s)
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
        tick = 0
        while not self._stop.is_set():
            reading = tree_memory(self.pid, with_pss=False)
            if tick % self.PSS_EVERY == 0 and pss_needed(reading, self.memory_limit_mb):
                reading = dataclasses.replace(reading, pss_mb=tree_pss_mb(self.pid))
            self.observe(reading)
            if self._gpu.available:
                self.gpu_samples.append((time.time(), *self._gpu.sample()))
            tick += 1
            self._stop.wait(self.interval_s)

    def observe(self, reading: TreeMemory) -> None:
        """Takes a reading (the sampler's, or the child's own at its end); kills past the limit."""
        self.memory = self.memory.merge(reading)
        if reading.peak_mb > self.memory_limit_mb and not self.killed_reason:
            self.killed_reason = (
                f"over the memory budget: killed at the limit, the process tree reached {reading.peak_mb:,.0f} MB "
                f"of the {self.memory_limit_mb:,.0f} MB budget"
                if self.budget else
                f"out of memory: the process tree reached {reading.peak_mb:.0f} MB, over the {self.memory_limit_mb:.0f} MB limit"
            )
            kill_tree(self.pid)

    def gpu_summary(self, window: Optional[tuple[float, float]] = None) -> dict:
        """GPU utilisation and memory over the timed window, or why there is none."""
        if not self._gpu.available:
            return {"available": False, "note": self._gpu.note}
        return summarize_gpu(self.gpu_samples, self._gpu.name, self._gpu.total_mb, window)


def summarize_gpu(samples: list[tuple[float, ...]], name: str, total_mb: float,
                  window: Optional[tuple[float, float]] = None) -> dict:
    """NVML's samples (time, util %, memory MB, PCIe MB/s to and from the GPU) over the timed
    window: the mean utilisation and link traffic, the highest memory. All samples where none
    fell inside the window (a window shorter than the sampling interval)."""
    inside = [s for s in samples if window is None or window[0] <= s[0] <= window[1]]
    inside = inside or samples
    if not inside:
        return {"available": True, "name": name, "note": "no samples taken"}
    summary = {
        "available": True,
        "name": name,
        "util_mean": statistics.fmean(s[1] for s in inside),
        "memory_mb_peak": max(s[2] for s in inside),
        "memory_mb_total": total_mb,
        "note": f"{len(inside)} NVML samples",
    }
    links = [s for s in inside if len(s) >= 5]
    if links:
        summary.update(pcie_to_gpu_mb_s=statistics.fmean(s[3] for s in links),
                       pcie_from_gpu_mb_s=statistics.fmean(s[4] for s in links))
    return summary


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

    def sample(self) -> tuple[float, ...]:
        """Utilisation %, memory used MB and, where NVML reads it, PCIe MB/s to and from the GPU."""
        rates = self._pynvml.nvmlDeviceGetUtilizationRates(self._handle)
        memory = self._pynvml.nvmlDeviceGetMemoryInfo(self._handle)
        try:
            # KB/s over NVML's last 20 ms: RX is what the GPU received (host-to-device copies)
            to_gpu = self._pynvml.nvmlDeviceGetPcieThroughput(self._handle, self._pynvml.NVML_PCIE_UTIL_RX_BYTES)
            from_gpu = self._pynvml.nvmlDeviceGetPcieThroughput(self._handle, self._pynvml.NVML_PCIE_UTIL_TX_BYTES)
        except Exception:  # not every GPU or driver reads it
            return float(rates.gpu), memory.used / MB
        return float(rates.gpu), memory.used / MB, to_gpu / 1024, from_gpu / 1024


def cpu_has_bf16() -> bool:
    """Native bfloat16 on this CPU (x86 avx512_bf16 or AMX; Arm's bf16)."""
    try:
        with open("/proc/cpuinfo") as handle:
            flags = handle.read()
    except OSError:
        return False
    return any(flag in flags for flag in ("avx512_bf16", "amx_bf16", " bf16"))
