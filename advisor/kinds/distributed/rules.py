"""The distributed kind's diagnosis rules: the network, and compute beside it."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from advisor.evidence import Evidence
from advisor.findings import Diagnosis, Finding, Rule, Thresholds, band, diagnose_memory
from advisor.kinds.train.rules import diagnose_compute, diagnose_input, diagnose_overhead, diagnose_transfer

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
    """Compute, in a data-parallel job: its substantial operators, within what the input and the
    communication leave of the step (`charged_once`)."""
    found = diagnose_compute(evidence, t)
    share = evidence.derived.get("communication_share", 0.0)
    if found is None or share < t.network_moderate:
        return found
    return replace(found, severity="low", share=min(found.share, charged_once(evidence, share)),
                   summary=f"compute takes the remaining {1 - share:.0%} of the step")


def diagnose_overhead_beside_network(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    """Operator overhead, in a data-parallel job. The profile times the rank's whole step, the
    wait on the all-reduce included, and sees that wait outside any substantial operator:
    charged to the network already, it is taken off here, so each second counts once."""
    found = diagnose_overhead(evidence, t)
    share = evidence.derived.get("communication_share", 0.0)
    if found is None or share < t.network_moderate:
        return found
    outside = max(0.0, min(found.share - share, charged_once(evidence, share)))
    severity = found.severity if outside >= t.reach else "low"  # what is left may be the operators' own time
    return replace(found, share=outside, severity=severity,
                   summary=f"{found.summary}; once the wait on the all-reduce is charged to the network, "
                           f"{outside:.0%} of the step")


def charged_once(evidence: Evidence, communication: float) -> float:
    """What the input's wait and the communication leave of the step."""
    return max(0.0, 1.0 - evidence.full.data_wait_share - communication)


DISTRIBUTED_RULES: tuple[Rule, ...] = (diagnose_memory, diagnose_network, diagnose_input, diagnose_transfer,
                                       diagnose_overhead_beside_network, diagnose_compute_beside_network)
