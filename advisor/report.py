"""Terminal rendering of a diagnosis."""

from __future__ import annotations

from advisor.diagnose import Diagnosis, Finding
from advisor.evidence import Evidence


def format_value(finding: Finding) -> str:
    value = finding.value
    if finding.unit:
        return f"{value:,.1f} {finding.unit}" if value < 100 else f"{value:,.0f} {finding.unit}"
    return f"{value:.1%}" if abs(value) <= 1.5 else f"{value:.2f}x"


def format_threshold(finding: Finding) -> str:
    if finding.threshold is None:
        return ""
    probe = Finding(finding.metric, finding.threshold, unit=finding.unit)
    return f"  (threshold {format_value(probe)})"


def render_diagnosis(name: str, evidence: Evidence, diagnoses: list[Diagnosis]) -> str:
    full, derived = evidence.full, evidence.derived
    lines = [f"advisor diagnose: {name}", ""]
    if full.ok:
        lines.append(
            f"throughput  {full.samples_per_s:,.0f} samples/s on {full.device}"
            f"   step p50 {full.step_ms_p50:.1f} ms, p95 {full.step_ms_p95:.1f} ms"
        )
        if derived:
            lines.append(
                f"ideal       {derived['ideal_samples_per_s']:,.0f} samples/s (one batch reused on the device): "
                f"actual is {1 / derived['ideal_over_actual']:.0%} of it" if derived["ideal_over_actual"] else ""
            )
        lines.append(
            f"resources   peak memory {full.peak_memory_mb:,.0f} MB ({full.memory_source}),"
            f" CPU {full.cpu_util:.0%} of {_cores()} cores, GPU: {_gpu_line(full.gpu)}"
        )
    else:
        lines.append(f"the full run failed: {full.reason}")
    for run in (evidence.synthetic, evidence.cached, evidence.profile):
        if not run.ok:
            lines.append(f"the {run.mode} run failed: {run.reason}")
    lines.append("")
    if diagnoses:
        lines.append(f"bottleneck: {diagnoses[0].bottleneck} ({diagnoses[0].severity})")
    for rank, diagnosis in enumerate(diagnoses, start=1):
        lines.append(f"{rank}. [{diagnosis.severity}] {diagnosis.summary}")
        for finding in diagnosis.evidence:
            lines.append(f"     {finding.metric}: {format_value(finding)}{format_threshold(finding)}")
        lines.append(f"     fixes to try: {', '.join(diagnosis.fixes)}")
    ops = evidence.profile.operators if evidence.profile.ok else {}
    if ops.get("top"):
        lines += ["", f"top operators ({ops['time_basis']} self time per step, from the profiling run):"]
        for op in ops["top"]:
            lines.append(
                f"  {op['name'][:48]:<48} {op['self_ms_per_step']:8.2f} ms  {op['share']:6.1%}"
                f"  {op['calls_per_step']:6.0f} calls"
            )
    return "\n".join(line for line in lines if line is not None)


def _gpu_line(gpu: dict) -> str:
    if not gpu.get("available"):
        return gpu.get("note", "no GPU")
    return f"{gpu['name']} {gpu.get('util_mean', 0):.0f}% busy, {gpu.get('memory_mb_peak', 0):,.0f} MB"


def _cores() -> int:
    import os

    return os.cpu_count() or 1
