"""The pipeline kind's derived quantities: its stages' shares of the run's wall time."""

from __future__ import annotations

from advisor.evidence import stage_shares
from advisor.measure import Measurement


def derive_pipeline(full: Measurement, profile: Measurement) -> dict:
    """Stage shares; how much of the read is CPU (parsing) rather than waiting (storage); how
    much of the whole run is the user's Python called back row by row."""
    if not full.ok:
        return {}
    shares = stage_shares(full)
    read = full.stages.get("read", {})
    derived = {
        "rows_per_s": full.samples_per_s,
        "stage_shares": shares,
        "read_share": shares.get("read", 0.0),
        "read_cpu_over_wall": read.get("cpu_s", 0.0) / read["wall_s"] if read.get("wall_s") else 0.0,
        "transform_share": shares.get("transform", 0.0),
    }
    if profile.ok and profile.hotspots:
        spots = profile.hotspots
        # A row-wise call is Python overhead as a whole: the user's row function and the
        # library's per-row machinery (building a Series per row) alike.
        rowwise = max((c["caller"]["inclusive_share"] for c in spots.get("callbacks", [])), default=0.0)
        python = max(spots["python_share"], rowwise)
        derived.update(
            python_share_of_transform=python,
            callback_share_of_transform=spots["callback_share"],
            python_share=python * derived["transform_share"],
        )
    return derived
