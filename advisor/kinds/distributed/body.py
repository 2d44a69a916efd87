"""The distributed kind's `advisor diagnose` body: the train body, its ranks and their communication."""

from __future__ import annotations

from advisor.evidence import Evidence
from advisor.findings import THRESHOLDS, Diagnosis
from advisor.kinds.train.body import training_body

ACCUMULATED_STEPS = 4  # the no_sync accumulation the advice prices


def distributed_body(evidence: Evidence, diagnoses: list[Diagnosis]) -> list[str]:
    """A data-parallel job's diagnosis: the training body, its ranks and their communication,
    and the fixes that change what is trained, priced but never tried."""
    lines = training_body(evidence, diagnoses)
    derived = evidence.derived
    if not derived.get("world_size"):
        return lines
    rate = derived.get("bandwidth_mbit_s")
    ranks = [f"{r:,.0f}" for r in derived["rank_samples_per_s"]]
    at = ""
    if rate:
        at = f", all-reduced at {rate:,.0f} Mbit/s (one all-reduce of that size, timed alone)"
    extra = [
        f"ranks       {derived['world_size']} (samples/s each: {', '.join(ranks)}); the job's rate is the global batch "
        "over the slowest rank's step",
        f"network     {derived['bytes_per_step'] / 1e6:,.1f} MB of gradients a step{at}; without communication "
        f"{derived['compute_alone_samples_per_s']:,.0f} samples/s, {derived['communication_share']:.0%} of the step is "
        "waiting on it",
    ]
    if derived["communication_share"] >= THRESHOLDS.network_moderate:
        k = ACCUMULATED_STEPS
        kept = 1 - derived["communication_share"]
        extra.append(f"not tried  (they change what is trained): accumulating {k} steps under no_sync() all-reduces "
                     f"once per {k} steps, up to {1 / (kept + (1 - kept) / k):.2f}x; a larger per-rank batch sends the "
                     "same bytes for more samples. Judge either on your own validation curve.")
    return lines[:1] + extra + lines[1:]
