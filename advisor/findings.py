"""What every kind's diagnosis rules share: the thresholds, a finding and a diagnosis, the
bands, and the memory rule. Pure functions; every threshold is named in `Thresholds`.

Bands follow the TensorFlow profiler (input-bound at 5% moderate, 20% high) and PyTorch's
retired profiler plugin (data loader > 5%, memory > 90%).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Optional

import psutil

from advisor.evidence import Evidence

SEVERITY_ORDER = {"high": 0, "moderate": 1, "low": 2}


@dataclass(frozen=True)
class Thresholds:
    input_moderate: float = 0.05  # exposed data-wait share of step time
    input_high: float = 0.20
    transfer_moderate: float = 0.05  # host-to-device copy share of step time
    transfer_high: float = 0.20
    memory_moderate: float = 0.90  # peak over the memory budget
    memory_high: float = 1.00
    overhead_min_ops_per_step: float = 100.0  # many operators per step ...
    overhead_max_substantial_share: float = 0.50  # ... and most of the step outside substantial ones
    # pipelines: shares of the run's wall time
    parse_moderate: float = 0.30  # reading, on the CPU
    parse_high: float = 0.50
    read_cpu_bound: float = 0.50  # read CPU over read wall at or above this: parsing, not waiting
    python_moderate: float = 0.20  # the user's Python, called back row by row
    python_high: float = 0.50
    # inference: latency's shape
    cold_start_moderate: float = 5.0  # the first request after load over the steady p50
    cold_start_high: float = 20.0
    cold_start_min_excess_ms: float = 20.0  # ... and above it by at least this much: a client would notice
    tail_moderate: float = 2.0  # p95 over p50
    tail_high: float = 4.0
    queueing: float = 0.30  # share of the latency spent waiting for the server: the tail is queueing
    utilisation_moderate: float = 0.50  # open load: arrival rate x service time, served one by one
    utilisation_high: float = 0.80
    compute_substantial: float = 0.50  # share of a request's operator time in substantial operators
    # data-parallel training: the step's exposed communication, full run against the same steps without it
    network_moderate: float = 0.20
    network_high: float = 0.50
    # CUDA: the share of the step the GPU idles between kernels while the host launches them
    launch_moderate: float = 0.20
    launch_high: float = 0.50
    # any kind: a fix aimed at this share of the step or more is tried, whatever its diagnosis's band
    reach: float = 0.50
    # training on the CPU: the pages a step hands back and maps again, in MB, that name the allocator
    page_faults_mb: float = 32.0


THRESHOLDS = Thresholds()
MEMORY_FIX_HEADROOM = THRESHOLDS.memory_moderate  # a memory fix keeps under this share of the budget: at or above it is memory-bound


@dataclass(frozen=True)
class Finding:
    """One piece of evidence: a metric, its value, and the threshold it was judged against."""

    metric: str
    value: float
    threshold: Optional[float] = None
    unit: str = ""


@dataclass(frozen=True)
class Diagnosis:
    bottleneck: str  # input-fetch | input-prep | transfer | compute | overhead | memory | network | ...
    severity: str  # high | moderate | low
    share: float  # the share of step time it explains (or, for memory, peak over budget)
    summary: str
    evidence: tuple[Finding, ...]
    # the recipes for it: the rule's likeliest first, then every other recipe of the kind that
    # targets this bottleneck (`advisor.recipes.fixes_for`, filled in by `diagnosis.diagnose`)
    fixes: tuple[str, ...]
    named: tuple[str, ...] = ()  # fixes its evidence names outright (page faults: the allocator), tried whatever its band

    def to_dict(self) -> dict:
        return asdict(self)


def band(value: float, moderate: float, high: float) -> Optional[str]:
    if value >= high:
        return "high"
    if value >= moderate:
        return "moderate"
    return None


def small_operators(evidence: Evidence, t: Thresholds) -> Optional[dict]:
    """The profile's operator summary when a step (or request) runs many operators and spends
    most of its time outside substantial ones; None otherwise."""
    ops = evidence.profile.operators if evidence.profile.ok else {}
    if not ops or not evidence.full.ok:
        return None
    if ops["ops_per_step"] < t.overhead_min_ops_per_step or ops["substantial_op_share"] > t.overhead_max_substantial_share:
        return None
    return ops


def memory_budget(evidence: Evidence) -> tuple[float, str]:
    """The budget peak memory is judged against, and where it comes from."""
    if evidence.max_memory_mb:
        return evidence.max_memory_mb, "constraints.max_memory_mb"
    gpu = evidence.full.gpu
    if evidence.full.device == "cuda" and gpu.get("memory_mb_total"):
        return gpu["memory_mb_total"], "GPU memory"
    return psutil.virtual_memory().total / 2**20, "machine memory"


def diagnose_memory(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    full = evidence.full
    budget, source = memory_budget(evidence)
    if not full.ok and full.reason.startswith("out of memory"):
        summary = f"memory-bound: the job ran out of memory ({full.reason})"
        finding = Finding("peak memory before the failure", full.peak_memory_mb, budget, "MB")
        return Diagnosis("memory", "high", 1.0, summary, (finding,), ())
    if not full.ok or not full.peak_memory_mb:
        return None
    ratio = full.peak_memory_mb / budget
    severity = band(ratio, t.memory_moderate, t.memory_high)
    if severity is None:
        return None
    summary = f"memory-bound: peak {full.peak_memory_mb:,.0f} MB is {ratio:.0%} of the {budget:,.0f} MB budget ({source})"
    findings = (
        Finding(f"peak memory ({full.memory_source})", full.peak_memory_mb, budget, "MB"),
        Finding("peak over budget", ratio, t.memory_moderate if severity == "moderate" else t.memory_high),
    )
    return Diagnosis("memory", severity, ratio, summary, findings, ())


Rule = Callable[[Evidence, Thresholds], Optional[Diagnosis]]
