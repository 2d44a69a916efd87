"""The script kind's derived quantities: the steps found in the script, timed as the train kind's are."""

from __future__ import annotations


def derive_script(full, synthetic) -> dict:
    """The training rules' quantities: the ideal is the replayed run's step where the script has
    a DataLoader, else the full step without its waits. Where the main process loads the
    batches, a sample's load time off the CPU is the fetch (storage) share."""
    if not full.ok or not full.samples_per_s:
        return {}
    replayed = synthetic.ok and synthetic.samples_per_s and "loader" in (synthetic.environment or {})
    ideal_ms = synthetic.step_ms_mean if replayed else full.step_ms_mean * (1 - full.data_wait_share)
    wait = max(0.0, 1 - ideal_ms / full.step_ms_mean)
    probe = full.sample_probe
    split = {}
    if probe and probe["wall_ms"] > 0:
        cpu_ms = min(probe["cpu_ms"], probe["wall_ms"])
        split = {"sample_wall_ms": probe["wall_ms"], "sample_cpu_ms": probe["cpu_ms"],
                 "fetch_share_of_input": 1 - cpu_ms / probe["wall_ms"]}
    return {
        "ideal_samples_per_s": full.samples_per_s / max(1e-9, 1 - wait),
        "actual_samples_per_s": full.samples_per_s,
        "ideal_step_ms": ideal_ms,
        "actual_step_ms": full.step_ms_mean,
        "stall_share": wait,
        "exposed_wait_share": full.data_wait_share,
        "ideal_over_actual": 1 / max(1e-9, 1 - wait),
        **split,
    }
