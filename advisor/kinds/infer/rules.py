"""The infer kind's diagnosis rules: cold start, tail, under-batching, overhead, compute."""

from __future__ import annotations

from typing import Optional

from advisor.evidence import Evidence
from advisor.findings import Diagnosis, Finding, Rule, Thresholds, band, diagnose_memory, small_operators


def diagnose_cold_start(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    """A first request far over the steady p50; not where the objective is a capacity, a settled
    service's figure that no cold start moves (`loop.settle`)."""
    derived = evidence.derived
    if derived.get("capacity_search"):
        return None
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
