"""The train kind's diagnosis rules: input, transfer, overhead (and kernel launches on a GPU), compute."""

from __future__ import annotations

from typing import Optional

from advisor.evidence import Evidence
from advisor.findings import Diagnosis, Finding, Rule, Thresholds, band, diagnose_memory, small_operators
from advisor.measure import page_faults_mb


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
    # beside an input stall, compute is still the bottleneck where it holds most of the step
    severity = "high" if wait < t.input_moderate else "moderate" if share >= t.reach else "low"
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
    faulted_mb = page_faults_mb(full.page_faults_per_step)
    named = ("allocator",) if faulted_mb >= t.page_faults_mb and "gpu_busy_share" not in evidence.derived else ()
    if named:  # the pages each step hands back and maps again: what the allocator's thresholds keep
        findings.append(Finding("memory mapped again each step (minor page faults)", faulted_mb, t.page_faults_mb, "MB"))
        fixes = ("allocator", *fixes)
    return Diagnosis("compute", severity, share, summary, tuple(findings), fixes, named)


TRAINING_RULES: tuple[Rule, ...] = (diagnose_memory, diagnose_input, diagnose_transfer, diagnose_overhead, diagnose_compute)
