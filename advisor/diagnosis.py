"""Evidence -> ranked diagnoses. Pure functions; every threshold is named in `Thresholds`.

Bands follow the TensorFlow profiler (input-bound at 5% moderate, 20% high) and PyTorch's
retired profiler plugin (data loader > 5%, memory > 90%).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
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


THRESHOLDS = Thresholds()


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
    fixes: tuple[str, ...]

    def to_dict(self) -> dict:
        return asdict(self)


def diagnose(evidence: Evidence, thresholds: Thresholds = THRESHOLDS) -> list[Diagnosis]:
    """All diagnoses that apply (the rules of the evidence's kind), the bottleneck first."""
    from advisor.kinds import kind_of

    found = [d for rule in kind_of(evidence.kind).rules() if (d := rule(evidence, thresholds)) is not None]
    return sorted(found, key=lambda d: (SEVERITY_ORDER[d.severity], -d.share))


def band(value: float, moderate: float, high: float) -> Optional[str]:
    if value >= high:
        return "high"
    if value >= moderate:
        return "moderate"
    return None


def diagnose_input(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    full, derived = evidence.full, evidence.derived
    if not full.ok:
        return None
    wait = full.data_wait_share
    severity = band(wait, t.input_moderate, t.input_high)
    if severity is None:
        return None
    fetch_share = derived.get("fetch_share_of_input")
    is_fetch = fetch_share is not None and fetch_share >= 0.5
    findings = [Finding("exposed data-wait share", wait, t.input_high if severity == "high" else t.input_moderate)]
    if "stall_share" in derived:
        findings.append(Finding("stall share (full vs synthetic batch)", derived["stall_share"]))
        findings.append(Finding("ideal samples/s (synthetic batch)", derived["ideal_samples_per_s"], unit="samples/s"))
        findings.append(Finding("actual samples/s", derived["actual_samples_per_s"], unit="samples/s"))
    if fetch_share is not None:
        findings += [
            Finding("per-sample wall time", derived["sample_wall_ms"], unit="ms"),
            Finding("per-sample CPU time", derived["sample_cpu_ms"], unit="ms"),
            Finding("fetch share of the input work (off-CPU)", fetch_share, 0.5),
        ]
    kind = "fetch" if is_fetch else "prep"
    why = (
        "samples wait off the CPU (storage or network latency)"
        if is_fetch
        else "samples cost CPU time to prepare (decode, transform, batch)"
    )
    summary = f"input-bound ({kind}): the step waits for data {wait:.0%} of the time; {why}"
    if "gpu_busy_share" in derived:  # the same second, seen from the device
        busy = derived["gpu_busy_share"]
        summary = (f"input-bound ({kind}), the GPU starves: the GPU is busy {busy:.0%} of the step; {wait:.0%} of the "
                   f"step waits on the next batch; {why}")
        findings.insert(1, busy_finding(derived))
    if fetch_share is not None:  # threads or processes: what a sample's load time is spent on
        wall, cpu = derived["sample_wall_ms"], min(derived["sample_cpu_ms"], derived["sample_wall_ms"])
        summary += (f" (a sample takes {wall:.2f} ms to load, {cpu:.2f} ms of it on the CPU: "
                    + ("mostly waiting, so threads in each loading process fit)" if is_fetch
                       else "mostly computing, so worker processes fit: threads would queue on the GIL)"))
    fixes = ("dataloader", "fetch_threads") if is_fetch else ("dataloader", "threads")
    return Diagnosis(f"input-{kind}", severity, wait, summary, tuple(findings), fixes)


def diagnose_transfer(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    full = evidence.full
    if not full.ok or full.device != "cuda":
        return None
    severity = band(full.transfer_share, t.transfer_moderate, t.transfer_high)
    if severity is None:
        return None
    summary = f"transfer-bound: host-to-device copies take {full.transfer_share:.0%} of the step"
    finding = Finding("host-to-device copy share", full.transfer_share, t.transfer_moderate)
    return Diagnosis("transfer", severity, full.transfer_share, summary, (finding,), ("dataloader",))


def gpu_line(derived: dict) -> str:
    """Where a GPU's step goes, each share charged once."""
    return (f"the GPU is busy {derived['gpu_busy_share']:.0%} of the step, waits on the next batch "
            f"{derived['gpu_idle_input_share']:.0%}, on copies {derived['gpu_idle_transfer_share']:.0%} and between "
            f"kernel launches {derived['gpu_idle_launch_share']:.0%}")


def busy_finding(derived: dict) -> Finding:
    return Finding("GPU busy share of the step (kernel time, profiled)", derived["gpu_busy_share"])


def small_operators(evidence: Evidence, t: Thresholds) -> Optional[dict]:
    """The profile's operator summary when a step (or request) runs many operators and spends
    most of its time outside substantial ones; None otherwise."""
    ops = evidence.profile.operators if evidence.profile.ok else {}
    if not ops or not evidence.full.ok:
        return None
    if ops["ops_per_step"] < t.overhead_min_ops_per_step or ops["substantial_op_share"] > t.overhead_max_substantial_share:
        return None
    return ops


def diagnose_launches(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    """Launch-bound, on a GPU: the device idles between kernels while the host launches them."""
    derived = evidence.derived
    share = derived["gpu_idle_launch_share"]
    severity = band(share, t.launch_moderate, t.launch_high)
    if severity is None:
        return None
    ops = evidence.profile.operators
    summary = (f"overhead-bound (kernel launches): the GPU idles {share:.0%} of the step between kernels while the "
               f"host launches them; {gpu_line(derived)}")
    findings = (
        Finding("GPU idle between kernel launches, share of the step", share, t.launch_moderate),
        busy_finding(derived),
        Finding("kernel time a step", derived["gpu_kernel_ms_per_step"], unit="ms"),
        Finding("operators per step", ops.get("ops_per_step", 0.0)),
    )
    return Diagnosis("overhead", severity, share, summary, findings, ("compile", "fused_optimizer"))


def diagnose_overhead(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    if "gpu_idle_launch_share" in evidence.derived:  # the device's own account of the step
        return diagnose_launches(evidence, t)
    ops = small_operators(evidence, t)
    if ops is None:
        return None
    per_step, substantial = ops["ops_per_step"], ops["substantial_op_share"]
    share = (1 - substantial) * (1 - evidence.full.data_wait_share)
    summary = (
        f"overhead-bound: {per_step:.0f} operators per step, {ops['us_per_op']:.0f} us each on average; "
        f"{1 - substantial:.0%} of compute is outside substantial operators"
    )
    findings = (
        Finding("operators per step", per_step, t.overhead_min_ops_per_step),
        Finding("mean time per operator", ops["us_per_op"], unit="us"),
        Finding("share of compute in substantial operators", substantial, t.overhead_max_substantial_share),
    )
    severity = "high" if evidence.full.data_wait_share < t.input_high else "moderate"
    return Diagnosis("overhead", severity, share, summary, findings, ("compile",))


def diagnose_compute(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    full = evidence.full
    if not full.ok:
        return None
    wait = full.data_wait_share
    ops = evidence.profile.operators if evidence.profile.ok else {}
    substantial = ops.get("substantial_op_share", 1.0)
    share = (1 - wait) * substantial
    findings = [Finding("exposed data-wait share", wait, t.input_moderate)]
    if ops:
        findings.append(Finding("share of compute in substantial operators", substantial))
        if ops["top"]:
            top = ops["top"][0]
            findings.append(Finding(f"top operator {top['name']} (share of operator time)", top["share"]))
    if "ideal_over_actual" in evidence.derived:
        findings.append(Finding("ideal over actual throughput", evidence.derived["ideal_over_actual"]))
    severity = "high" if wait < t.input_moderate else "low"
    summary = (
        f"compute-bound: data waits only {wait:.0%} of the step; the model's own operators dominate"
        if severity == "high"
        else f"compute takes the remaining {1 - wait:.0%} of the step"
    )
    fixes = ("amp", "compile", "threads")
    if "gpu_busy_share" in evidence.derived:  # the share is the GPU's kernel time: the rest is charged elsewhere
        derived = evidence.derived
        share = derived["gpu_busy_share"]
        summary = (f"compute-bound: {gpu_line(derived)}" if severity == "high"
                   else f"the GPU computes {share:.0%} of the step")
        findings.insert(1, busy_finding(derived))
        fixes = ("amp", "tf32", "compile", "channels_last", "cudnn_benchmark", "fused_optimizer")
    return Diagnosis("compute", severity, share, summary, tuple(findings), fixes)


NETWORK_FIXES = ("comm_hook", "ddp_buckets", "ddp_bucket_view", "ddp_static_graph", "ddp_unused")


def diagnose_network(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    """Communication-bound: the ranks' step with gradients all-reduced against the same steps
    with each rank keeping its own gradient (the differential's compute-alone ideal)."""
    derived = evidence.derived
    share = derived.get("communication_share")
    if share is None:
        return None
    severity = band(share, t.network_moderate, t.network_high)
    if severity is None:
        return None
    megabytes = derived["bytes_per_step"] / 1e6
    rate = derived.get("bandwidth_mbit_s")
    findings = [
        Finding("communication share of the step (full vs no all-reduce)", share,
                t.network_high if severity == "high" else t.network_moderate),
        Finding("samples/s without communication", derived["compute_alone_samples_per_s"], unit="samples/s"),
        Finding("samples/s as run", derived["actual_samples_per_s"], unit="samples/s"),
        Finding("gradients all-reduced per step", megabytes, unit="MB"),
    ]
    if rate:
        findings.append(Finding("achieved all-reduce bandwidth", rate, unit="Mbit/s"))
    over = f" at {rate:,.0f} Mbit/s" if rate else ""
    summary = (f"network-bound: the {derived['world_size']} ranks wait on the gradient all-reduce {share:.0%} of the step; "
               f"{megabytes:,.1f} MB of gradients a step{over}")
    return Diagnosis("network", severity, share, summary, tuple(findings), NETWORK_FIXES)


def diagnose_compute_beside_network(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    """Compute, in a data-parallel job: what the communication leaves of the step."""
    found = diagnose_compute(evidence, t)
    share = evidence.derived.get("communication_share", 0.0)
    if found is None or share < t.network_moderate:
        return found
    return replace(found, severity="low", share=found.share * (1 - share),
                   summary=f"compute takes the remaining {1 - share:.0%} of the step")


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
    from advisor.kinds import kind_of

    fixes = kind_of(evidence.kind).memory_fixes
    if not full.ok and full.reason.startswith("out of memory"):
        summary = f"memory-bound: the job ran out of memory ({full.reason})"
        finding = Finding("peak memory before the failure", full.peak_memory_mb, budget, "MB")
        return Diagnosis("memory", "high", 1.0, summary, (finding,), fixes)
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
    return Diagnosis("memory", severity, ratio, summary, findings, fixes)


def diagnose_parse(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    derived = evidence.derived
    share, cpu = derived.get("read_share", 0.0), derived.get("read_cpu_over_wall", 0.0)
    severity = band(share, t.parse_moderate, t.parse_high)
    if severity is None or cpu < t.read_cpu_bound:
        return None
    fmt = evidence.profile.environment.get("format", "")
    summary = f"parse-bound: reading the {fmt} source takes {share:.0%} of the run, on the CPU"
    findings = (
        Finding("read share of the run", share, t.parse_high if severity == "high" else t.parse_moderate),
        Finding("read CPU over read wall time", cpu, t.read_cpu_bound),
        Finding("rows/s", derived.get("rows_per_s", 0.0), unit="rows/s"),
    )
    return Diagnosis("parse", severity, share, summary, findings, ("parquet_cache", "arrow_engine", "columns", "dtypes"))


def diagnose_io(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    derived = evidence.derived
    share, cpu = derived.get("read_share", 0.0), derived.get("read_cpu_over_wall", 0.0)
    severity = band(share, t.parse_moderate, t.parse_high)
    if severity is None or cpu >= t.read_cpu_bound:
        return None
    summary = f"I/O-bound: reading takes {share:.0%} of the run, mostly waiting on storage ({cpu:.0%} on the CPU)"
    findings = (
        Finding("read share of the run", share, t.parse_moderate),
        Finding("read CPU over read wall time", cpu, t.read_cpu_bound),
    )
    return Diagnosis("io", severity, share, summary, findings, ("parquet_cache", "columns"))


def diagnose_python(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    derived = evidence.derived
    share = derived.get("python_share", 0.0)
    severity = band(share, t.python_moderate, t.python_high)
    if severity is None:
        return None
    spots = evidence.profile.hotspots
    findings = [
        Finding("the user's Python, share of the run", share, t.python_high if severity == "high" else t.python_moderate),
        Finding("transform share of the run", derived.get("transform_share", 0.0)),
    ]
    callback = (spots.get("callbacks") or [None])[0]
    if callback:
        caller, callee = callback["caller"], callback["callee"]
        where = f"{_short(caller['file'])}:{caller['line']}"
        summary = (f"Python-overhead-bound: {where} calls {_short(callee['file'])}:{callee['line']} back row by row "
                   f"(`{caller['code']}`); the user's Python takes {share:.0%} of the run")
        findings.append(Finding(f"row-wise call at {where} (share of the transform)", caller["inclusive_share"]))
    else:
        top = (spots.get("lines") or [{}])[0]
        where = f"{_short(top.get('file', '?'))}:{top.get('line', '?')}"
        summary = f"Python-overhead-bound: the transform's own Python lines take {share:.0%} of the run, most at {where}"
    return Diagnosis("python", severity, share, summary, tuple(findings), ("vectorise", "dask"))


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


Rule = Callable[[Evidence, Thresholds], Optional[Diagnosis]]
TRAINING_RULES: tuple[Rule, ...] = (diagnose_memory, diagnose_input, diagnose_transfer, diagnose_overhead, diagnose_compute)
PIPELINE_RULES: tuple[Rule, ...] = (diagnose_memory, diagnose_parse, diagnose_io, diagnose_python)
DISTRIBUTED_RULES: tuple[Rule, ...] = (diagnose_memory, diagnose_network, diagnose_input, diagnose_transfer,
                                       diagnose_overhead, diagnose_compute_beside_network)


def diagnose_cold_start(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    derived = evidence.derived
    ratio = derived.get("cold_over_p50", 0.0)
    severity = band(ratio, t.cold_start_moderate, t.cold_start_high)
    if severity is None or derived["cold_start_ms"] - derived["p50_ms"] < t.cold_start_min_excess_ms:
        return None
    summary = (f"cold start: the first request after load took {derived['cold_start_ms']:.0f} ms, "
               f"{ratio:.0f}x the steady p50 ({derived['p50_ms']:.1f} ms)")
    findings = (Finding("first request after load", derived["cold_start_ms"], unit="ms"),
                Finding("cold start over steady p50", ratio, t.cold_start_high if severity == "high" else t.cold_start_moderate))
    return Diagnosis("cold-start", severity, min(1.0, 1 - 1 / ratio), summary, findings, ("warmup",))


def diagnose_tail(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    derived = evidence.derived
    ratio = derived.get("tail_ratio", 0.0)
    severity = band(ratio, t.tail_moderate, t.tail_high)
    if severity is None:
        return None
    queued = derived["queue_share"] >= t.queueing
    why = (f"requests wait for the server {derived['queue_share']:.0%} of their latency (queueing)" if queued
           else "the service time itself varies: lazy per-shape work, the allocator, garbage collection or "
                "oversubscribed threads")
    summary = f"tail latency: p95 is {ratio:.1f}x p50 ({derived['p95_ms']:.1f} vs {derived['p50_ms']:.1f} ms); {why}"
    findings = (Finding("p95 over p50", ratio, t.tail_high if severity == "high" else t.tail_moderate),
                Finding("share of latency spent queueing", derived["queue_share"], t.queueing),
                Finding("service time p95 over p50", derived.get("service_tail_ratio", 0.0)))
    fixes = ("dynamic_batching", "serving", "threads", "inference_mode") if queued else ("warmup", "threads", "inference_mode")
    return Diagnosis("tail", severity, 1 - 1 / ratio, summary, findings, fixes)


def diagnose_under_batched(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    derived = evidence.derived
    busy = derived.get("utilisation")
    if busy is None or derived.get("mean_batch", 1.0) > 1.5:
        return None
    severity = band(busy, t.utilisation_moderate, t.utilisation_high)
    if severity is None:
        return None
    summary = (f"under-batched: requests arrive {busy:.0%} as fast as one-at-a-time service can take them; "
               f"{derived['queue_share']:.0%} of the latency is queueing that one batched call would amortise")
    findings = (Finding("arrival rate x service time", busy, t.utilisation_high if severity == "high" else t.utilisation_moderate),
                Finding("service time p50", derived["service_ms_p50"], unit="ms"),
                Finding("share of latency spent queueing", derived["queue_share"]))
    return Diagnosis("under-batched", severity, max(derived["queue_share"], 0.0), summary, findings, ("dynamic_batching", "serving"))


def diagnose_serving_compute(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    full, derived = evidence.full, evidence.derived
    ops = evidence.profile.operators if evidence.profile.ok else {}
    if not full.ok or not ops:
        return None
    substantial = ops.get("substantial_op_share", 0.0)
    if substantial < t.compute_substantial:
        return None
    share = (1 - derived.get("queue_share", 0.0)) * substantial
    findings = [Finding("share of request time in substantial operators", substantial, t.compute_substantial),
                Finding("share of latency spent queueing", derived.get("queue_share", 0.0), t.queueing)]
    if ops.get("top"):
        top = ops["top"][0]
        findings.append(Finding(f"top operator {top['name']} (share of operator time)", top["share"]))
    severity = "high" if derived.get("queue_share", 0.0) < t.queueing else "moderate"
    summary = f"compute-bound: the model's own operators take {substantial:.0%} of each request's time"
    return Diagnosis("compute", severity, share, summary, tuple(findings),
                     ("inference_mode", "amp", "compile", "threads", "quantize_dynamic", "channels_last", "serving"))


def diagnose_serving_overhead(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    ops = small_operators(evidence, t)
    if ops is None:
        return None
    per_request, substantial = ops["ops_per_step"], ops["substantial_op_share"]
    summary = (f"overhead-bound: {per_request:.0f} operators per request, {ops['us_per_op']:.0f} us each on average; "
               f"{1 - substantial:.0%} of its time is outside substantial operators")
    findings = (Finding("operators per request", per_request, t.overhead_min_ops_per_step),
                Finding("share of request time in substantial operators", substantial, t.overhead_max_substantial_share))
    return Diagnosis("overhead", "high", 1 - substantial, summary, findings, ("compile", "inference_mode", "serving"))


SERVING_RULES: tuple[Rule, ...] = (diagnose_memory, diagnose_cold_start, diagnose_tail, diagnose_under_batched,
                                   diagnose_serving_overhead, diagnose_serving_compute)
