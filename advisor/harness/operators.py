"""Operator statistics from a torch.profiler run: the top operators and the overhead evidence."""

from __future__ import annotations

from typing import Any

SUBSTANTIAL_OP_US = 50.0  # an operator this long does real work; shorter ones are mostly dispatch cost
TOP_OPERATORS = 8


def summarize_profile(events: Any, steps: int, compute_s: float, on_cuda: bool) -> dict:
    """Summarizes profiler events over `steps` training steps that took `compute_s` in all.

    Returns the top operators by self time, the outermost operator calls per step, and the
    share of compute time spent inside substantial operators (each >= SUBSTANTIAL_OP_US).
    The rest of the step (Python, dispatch, many tiny kernels) is what operator fusion removes.
    """
    outer = [event for event in events if event.name.startswith("aten::") and not _inside_aten(event)]
    durations = [_duration_us(event, on_cuda) for event in outer]
    substantial_us = sum(d for d in durations if d >= SUBSTANTIAL_OP_US)
    compute_us = max(compute_s * 1e6, 1e-9)
    averages = [a for a in events.key_averages() if a.key.startswith("aten::")]
    total_self = sum(_self_us(a, on_cuda) for a in averages) or 1.0
    ranked = sorted(averages, key=lambda a: _self_us(a, on_cuda), reverse=True)[:TOP_OPERATORS]
    return {
        "steps": steps,
        "compute_ms_per_step": 1000 * compute_s / steps,
        "ops_per_step": len(outer) / steps,
        "us_per_op": compute_us / max(len(outer), 1),
        "substantial_op_share": min(1.0, substantial_us / compute_us),
        "top": [
            {
                "name": a.key,
                "calls_per_step": a.count / steps,
                "self_ms_per_step": _self_us(a, on_cuda) / 1000 / steps,
                "share": _self_us(a, on_cuda) / total_self,
            }
            for a in ranked
        ],
        "time_basis": "device" if on_cuda else "cpu",
    }


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


def _self_us(average: Any, on_cuda: bool) -> float:
    if on_cuda:
        return float(getattr(average, "self_device_time_total", 0.0))
    return float(average.self_cpu_time_total)
