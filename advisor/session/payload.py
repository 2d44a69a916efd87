"""The session as `recommendations.json` holds it (also the MLflow artifact): the contract users
and tools read."""

from __future__ import annotations

import time
from dataclasses import asdict

from advisor.advice import advice_for
from advisor.kinds import kind_of
from advisor.session.results import SessionResult


def session_payload(result: SessionResult, print_fingerprint: dict) -> dict:
    """The `recommendations.json` contract (also the MLflow artifact)."""
    config = result.config
    return {
        "workload": config.name,
        "config": str(config.path),
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(result.started)),
        "duration_s": result.finished - result.started,
        "first_verified_s": result.first_verified_s,
        "fingerprint": print_fingerprint["digest"],
        "fingerprint_components": print_fingerprint["components"],
        "unit": kind_of(config.kind).unit(config),
        "baseline": {
            "plan": result.baseline,
            "samples_per_s": result.baseline_samples_per_s,
            "peak_memory_mb": result.baseline_peak_mb,
            "measurement": result.evidence.full.to_dict(),
            "ideal_samples_per_s": result.evidence.derived.get("ideal_samples_per_s"),
            "step_breakdown_ms": result.baseline_breakdown_ms,
            "latency_ms": result.baseline_latency_ms,
            "epoch": result.baseline_epoch,
            "page_faults_per_step": result.baseline_page_faults_per_step,
        },
        "diagnoses": [d.to_dict() for d in result.diagnoses],
        "advice": advice_for(result.evidence.profile.hotspots, result.evidence.profile.environment.get("row_functions")) if any(
            d.bottleneck == "python" for d in result.diagnoses) else [],
        "row_functions": result.evidence.profile.environment.get("row_functions", []),
        "row_wise_share": result.evidence.profile.hotspots.get("callback_share"),
        "recipes_tried": list(result.chosen),
        "recipes_skipped": result.skipped,
        "min_speedup": config.search.min_speedup,
        "memory_fix": result.memory_fix,
        "baseline_failure": next((t.measurement.reason for t in result.trials if t.number == 0 and not t.measurement.ok), ""),
        "numerics_reference": result.numerics_reference,
        "numerics_envelope": result.numerics_envelope,
        "max_memory_mb": config.constraints.max_memory_mb,
        "recommendations": [r.to_dict() for r in result.recommendations],
        "rejected": [asdict(r) for r in result.rejected],
        "trials": [
            {"number": t.number, "plan": t.plan, "feasible": t.feasible, "measurement": t.measurement.to_dict()}
            for t in result.trials
        ],
        "pruned": [{"number": number, "plan": plan, "reason": reason, "unrun_s": unrun}
                   for number, plan, reason, unrun in result.pruned],
        "pruned_unrun_s": sum(unrun for *_, unrun in result.pruned),  # what pruning saved, at the trials' pace
        "ruled_out": [{"number": number, "plan": plan, "by": by, "reason": reason} for number, plan, by, reason in result.ruled_out],
        "loader_model": result.loader_model,
        "load_curve": load_curves(result),
    }


def load_curves(result: SessionResult) -> dict:
    """Objective capacity: the baseline's and #1's load curves (each rate replayed: offered and
    answered a second, p50, p95, p99, saturated), with the SLO; {} otherwise."""
    if not result.baseline_load_curve:
        return {}
    curves = {"slo_ms": result.config.constraints.p95_ms, "baseline": result.baseline_load_curve}
    top = result.recommendations[0] if result.recommendations else None
    if top is not None and top.load_curve:
        curves["#1"] = top.load_curve
    return curves
