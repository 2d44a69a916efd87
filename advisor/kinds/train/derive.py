"""The train kind's derived quantities: the differential runs (full, synthetic, cached) read
as shares of the step, and a GPU's time charged once."""

from __future__ import annotations

from advisor.measure import Measurement


def derive(full: Measurement, synthetic: Measurement, cached: Measurement) -> dict:
    """Ideal throughput, stall share and the fetch/prep split of the input work.

    The split uses only quantities measured inside one run (the per-sample probe and the cached
    run's own batching wait), never the difference of two runs' timings, which machine drift
    between the runs would corrupt.
    """
    if not (full.ok and synthetic.ok):
        return {}
    full_ms, ideal_ms = full.step_ms_mean, synthetic.step_ms_mean
    derived = {
        "ideal_samples_per_s": synthetic.samples_per_s,
        "actual_samples_per_s": full.samples_per_s,
        "ideal_step_ms": ideal_ms,
        "actual_step_ms": full_ms,
        "stall_share": max(0.0, full_ms - ideal_ms) / full_ms if full_ms else 0.0,
        "exposed_wait_share": full.data_wait_share,
        "ideal_over_actual": synthetic.samples_per_s / full.samples_per_s if full.samples_per_s else 0.0,
    }
    if cached.ok and cached.sample_probe and full.samples:
        probe = cached.sample_probe
        batch = full.samples_per_s * full_ms / 1000  # samples per step
        cpu_ms = min(probe["cpu_ms"], probe["wall_ms"])
        fetch_ms = batch * (probe["wall_ms"] - cpu_ms)
        prep_ms = batch * cpu_ms + cached.data_wait_share * cached.step_ms_mean  # + batching
        derived.update(
            sample_wall_ms=probe["wall_ms"],
            sample_cpu_ms=probe["cpu_ms"],
            fetch_ms_per_step=fetch_ms,
            prep_ms_per_step=prep_ms,
            fetch_share_of_input=fetch_ms / (fetch_ms + prep_ms) if fetch_ms + prep_ms > 0 else 0.0,
            cached_compute_ms=cached.step_ms_mean * (1 - cached.data_wait_share),  # the step's second reading
        )
        overheads = {"dispatch_ms": "sample_dispatch_ms", "handoff_ms": "sample_handoff_ms", "worker_mb": "loader_worker_mb"}
        derived.update({name: probe[key] for key, name in overheads.items() if key in probe})  # the loader model's
    return derived


def derive_gpu(full: Measurement, profile: Measurement) -> dict:
    """On a GPU, each second of the step charged to one cause, the shares adding up to one: the
    GPU busy running kernels (the profile's kernel time a step), idle waiting on the next batch
    (the exposed data wait), idle on the host-to-device copy, and idle between kernels while the
    host launches them (the rest of the compute). {} off the GPU or without a kernel time."""
    kernel_ms = profile.operators.get("device_ms_per_step") if profile.ok else None
    if full.device != "cuda" or not full.ok or not full.step_ms_mean or kernel_ms is None:
        return {}
    wait, transfer = full.data_wait_share, full.transfer_share
    busy = min(kernel_ms / full.step_ms_mean, max(0.0, 1.0 - wait - transfer))
    return {
        "gpu_kernel_ms_per_step": kernel_ms,
        "gpu_busy_share": busy,
        "gpu_idle_input_share": wait,
        "gpu_idle_transfer_share": transfer,
        "gpu_idle_launch_share": max(0.0, 1.0 - busy - wait - transfer),
    }
