"""The infer kind's derived quantities: latency's shape (cold start, tail, queueing) and the operators per request."""

from __future__ import annotations

from advisor.measure import Measurement


def derive_infer(full: Measurement, profile: Measurement) -> dict:
    """Latency's shape (tail over median, the cold start over the median, the share spent
    queueing) and, for open load, how busy the server is (arrival rate x service time)."""
    if not full.ok or not full.latency:
        return {}
    lat = full.latency
    derived = {
        "p50_ms": lat["p50_ms"], "p95_ms": lat["p95_ms"], "p99_ms": lat["p99_ms"],
        "throughput_per_s": lat["throughput_per_s"], "cold_start_ms": lat["cold_start_ms"],
        "cold_over_p50": lat["cold_start_ms"] / lat["p50_ms"] if lat["p50_ms"] else 0.0,
        "tail_ratio": lat["p95_ms"] / lat["p50_ms"] if lat["p50_ms"] else 0.0,
        "service_tail_ratio": lat["service_ms_p95"] / lat["service_ms_p50"] if lat["service_ms_p50"] else 0.0,
        "queue_share": lat["queue_share"], "service_ms_p50": lat["service_ms_p50"], "mean_batch": lat["mean_batch"],
        "capacity_search": "capacity" in lat,  # objective capacity: a settled service's figure (`loop.settle`)
    }
    if lat.get("rate_per_s"):  # open load
        derived["utilisation"] = lat["rate_per_s"] * lat["service_ms_p50"] / 1000
    if profile.ok and profile.operators:
        derived["ops_per_request"] = profile.operators.get("ops_per_step", 0.0)
    return derived
