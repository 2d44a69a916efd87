"""Operator statistics from a torch.profiler run: the top operators and the overhead evidence."""

from __future__ import annotations

from typing import Any

SUBSTANTIAL_OP_US = 50.0  # an operator this long does real work; shorter ones are mostly dispatch cost
TOP_OPERATORS = 8
STEP_LABEL = "advisor::train_step"  # marks each training step inside the profile


def _within(event: Any, windows: list[tuple[float, float]]) -> bool:
    """Whether an event starts inside a step (backward ops run on another thread, so a
    time window, not the parent chain, decides)."""
    start = event.time_range.start
    return any(low <= start <= high for low, high in windows)


def summarize_profile(events: Any, steps: int, compute_s: float, on_cuda: bool) -> dict:
    """Summarizes profiler events over `steps` training steps that took `compute_s` in all.

    Returns the top operators by self time, the outermost operator calls per step, and the
    share of compute time spent inside substantial operators (each >= SUBSTANTIAL_OP_US).
    The rest of the step (Python, dispatch, many tiny kernels) is what operator fusion removes.
    """
    windows = [(e.time_range.start, e.time_range.end) for e in events if e.name == STEP_LABEL]
    events = [e for e in events if _within(e, windows)]  # the step's own ops, not the loader's
    outer = [event for event in events if event.name.startswith("aten::") and not _inside_aten(event)]
    durations = [_duration_us(event, on_cuda) for event in outer]
    substantial_us = sum(d for d in durations if d >= SUBSTANTIAL_OP_US)
    compute_us = max(compute_s * 1e6, 1e-9)
    totals: dict[str, list[float]] = {}  # name -> [calls, self time us]
    for event in events:
        if event.name.startswith("aten::"):
            entry = totals.setdefault(event.name, [0, 0.0])
            entry[0] += 1
            entry[1] += _self_us(event, on_cuda)
    total_self = sum(self_us for _, self_us in totals.values()) or 1.0
    ranked = sorted(totals.items(), key=lambda item: item[1][1], reverse=True)[:TOP_OPERATORS]
    return {
        "steps": steps,
        "compute_ms_per_step": 1000 * compute_s / steps,
        **({"device_ms_per_step": kernel_us(events) / 1000 / steps} if on_cuda else {}),
        "ops_per_step": len(outer) / steps,
        "us_per_op": compute_us / max(len(outer), 1),
        "substantial_op_share": min(1.0, substantial_us / compute_us),
        "top": [
            {
                "name": name,
                "calls_per_step": calls / steps,
                "self_ms_per_step": self_us / 1000 / steps,
                "share": self_us / total_self,
            }
            for name, (calls, self_us) in ranked
        ],
        "time_basis": "device" if on_cuda else "cpu",
    }


def kernel_us(events: Any) -> float:
    """The GPU's busy time under these events: each kernel is attached to the one CPU operator
    that launched it, so the CPU events' kernels add up to every kernel once."""
    return float(sum(kernel.duration for event in events if getattr(event, "kernels", None)
                     and str(getattr(event, "device_type", "")).endswith("CPU") for kernel in event.kernels))


def _inside_aten(event: Any) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def _duration_us(event: Any, on_cuda: bool) -> float:
    if on_cuda:
        return float(getattr(event, "device_time_total", 0.0))
    return float(event.cpu_time_total)


def _self_us(event: Any, on_cuda: bool) -> float:
    if on_cuda:
        return float(getattr(event, "self_device_time_total", 0.0))
    return float(event.self_cpu_time_total)
