"""The distributed kind's derived quantities: the differential of the full run against the same steps without communication."""

from __future__ import annotations


def derive_communication(full, local) -> dict:
    """The differential: the full run's step against the same steps without communication; the
    bytes every step all-reduces and the bandwidth the link gave one all-reduce of that size."""
    if not (full.ok and local is not None and local.ok and full.step_ms_mean > 0):
        return {}
    measured = {**full.communication, **{k: v for k, v in local.communication.items() if k.startswith(("probe", "band"))}}
    return {
        "communication_share": max(0.0, 1 - local.step_ms_mean / full.step_ms_mean),
        "compute_alone_samples_per_s": local.samples_per_s,
        "actual_samples_per_s": full.samples_per_s,
        "ideal_over_actual": local.samples_per_s / full.samples_per_s if full.samples_per_s else 0.0,
        "world_size": measured.get("world_size", 1),
        "rank_samples_per_s": measured.get("rank_samples_per_s", []),
        "bytes_per_step": measured.get("bytes_per_step", 0),
        "bandwidth_mbit_s": measured.get("bandwidth_mbit_s"),
    }
