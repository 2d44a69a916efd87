"""The train kind's `advisor diagnose` body: its throughput against the ideal, the bottlenecks, its top operators."""

from __future__ import annotations

from advisor.advice import larger_batch, larger_batch_line
from advisor.evidence import Evidence, rate_unit
from advisor.findings import Diagnosis
from advisor.kinds.train.rules import gpu_line
from advisor.measure import epoch_of, page_faults_mb
from advisor.report import cores, diagnosis_lines, epoch_text, gpu_summary


def training_body(evidence: Evidence, diagnoses: list[Diagnosis]) -> list[str]:
    """A training job's diagnosis: its throughput against the ideal, the bottlenecks, its top operators."""
    full, derived = evidence.full, evidence.derived
    lines = []
    if full.ok:
        lines.append(
            f"throughput  {full.samples_per_s:,.0f} {rate_unit(full)} on {full.device}"
            f"   step p50 {full.step_ms_p50:.1f} ms, p95 {full.step_ms_p95:.1f} ms"
        )
        if full.epoch.get("end_s") is not None:
            lines.append(f"epochs      {epoch_text(epoch_of([full]))}")
        if derived.get("ideal_samples_per_s"):
            lines.append(
                f"ideal       {derived['ideal_samples_per_s']:,.0f} {rate_unit(full)} (one batch reused on the device): "
                f"actual is {1 / derived['ideal_over_actual']:.0%} of it" if derived["ideal_over_actual"] else ""
            )
        lines.append(
            f"resources   peak memory {full.peak_memory_mb:,.0f} MB ({full.memory_source}),"
            f" CPU {full.cpu_util:.0%} of {cores()} cores, GPU: {gpu_summary(full.gpu)}"
        )
        if "gpu_busy_share" in derived:
            lines.append(f"GPU time    {gpu_line(derived)} (kernels {derived['gpu_kernel_ms_per_step']:.2f} ms a step, "
                         "from the profiling run)" + _device_clock(full))
        batch = full.environment.get("loader", {}).get("batch_size") or 0
        bigger = larger_batch(batch, full.peak_memory_mb, full.environment.get("parameters", 0),
                              full.environment.get("gpu_memory_mb", 0.0)) if full.device == "cuda" else None
        if bigger:
            lines.append(f"batch       {larger_batch_line(bigger, batch)}")
        if full.page_faults_per_step:
            lines.append(f"page faults {full.page_faults_per_step:,.0f} a step ({page_faults_mb(full.page_faults_per_step):,.1f} MB "
                         "the process mapped again each step: most often memory its allocator handed back at a step's end)")
    else:
        lines.append(f"the full run failed: {full.reason}")
    for run in (evidence.synthetic, evidence.cached, evidence.local, evidence.profile):
        if run is not None and not run.ok:
            lines.append(f"the {run.mode} run failed: {run.reason}")
    lines += diagnosis_lines(diagnoses)
    ops = evidence.profile.operators if evidence.profile.ok else {}
    if ops.get("top"):
        lines += ["", f"top operators ({ops['time_basis']} self time per step, from the profiling run):"]
        for op in ops["top"]:
            lines.append(
                f"  {op['name'][:48]:<48} {op['self_ms_per_step']:8.2f} ms  {op['share']:6.1%}"
                f"  {op['calls_per_step']:6.0f} calls"
            )
    return lines


def _device_clock(run) -> str:
    timing = run.device_timing
    return (f"; a step's compute {timing['compute_ms_mean']:.2f} ms on CUDA events, the host's clock "
            f"{run.step_ms_mean * (1 - run.data_wait_share - run.transfer_share):.2f} ms" if timing.get("compute_ms_mean") else "")
