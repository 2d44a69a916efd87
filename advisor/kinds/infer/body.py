"""The infer kind's `advisor diagnose` body: its latency distribution and cold start, the bottlenecks, its top operators."""

from __future__ import annotations

from advisor.evidence import Evidence
from advisor.findings import Diagnosis
from advisor.kinds.infer.compare import nondeterministic_reason
from advisor.report import cores, diagnosis_lines, gpu_summary
from advisor.verify import EXACT_RTOL


def serving_body(evidence: Evidence, diagnoses: list[Diagnosis]) -> list[str]:
    """A service's diagnosis: its latency distribution and cold start, the bottlenecks, its top operators."""
    full = evidence.full
    if not full.ok:
        lines = [f"the replay failed: {full.reason}"]
    else:
        lat = full.latency
        lines = [
            f"latency     p50 {lat['p50_ms']:.1f} ms, p95 {lat['p95_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms, "
            f"max {lat['max_ms']:.1f} ms over {full.samples} requests on {full.device}",
            f"throughput  {lat['throughput_per_s']:,.1f} requests/s; service time p50 {lat['service_ms_p50']:.1f} ms; "
            f"{lat['queue_share']:.0%} of latency queueing",
            f"cold start  {lat['cold_start_ms']:.1f} ms for the first request after a {lat['load_s']:.1f} s load",
            f"resources   peak memory {full.peak_memory_mb:,.0f} MB ({full.memory_source}),"
            f" CPU {full.cpu_util:.0%} of {cores()} cores, GPU: {gpu_summary(full.gpu)}",
        ]
        repeat = full.output.get("repeat_difference")
        if repeat and repeat > EXACT_RTOL:
            lines.append(f"outputs     {nondeterministic_reason(repeat)}")
    if not evidence.profile.ok:
        lines.append(f"the profile run failed: {evidence.profile.reason}")
    lines += diagnosis_lines(diagnoses)
    ops = evidence.profile.operators if evidence.profile.ok else {}
    if ops.get("top"):
        lines += ["", f"top operators ({ops['time_basis']} self time per request, from the profiling run):"]
        lines += [f"  {op['name'][:48]:<48} {op['self_ms_per_step']:8.2f} ms  {op['share']:6.1%}  {op['calls_per_step']:6.0f} calls"
                  for op in ops["top"]]
    return lines
