"""Advice beside the line it found, for the row-wise code behind a Python-bound pipeline.

The profile names the row-wise call and its row function; the profile run has also rewritten
that function over whole columns (`advisor.vectorise`) and compared both forms on a sample.
A rewrite equal on the sample is trialled by the `vectorise` recipe, and only its measured,
compared run can make it a recommendation; this advice says where it stands. Where the rewrite
changed values, or the function holds a construct the rewriter cannot express, the advice says
which, and shows the template of a hand rewrite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

TEMPLATE = ("# rewrite the row function over whole columns: frame['a'] * frame['b'] instead of "
            "row['a'] * row['b'];\n# np.where(condition, a, b) instead of if/else; .str and .dt "
            "methods instead of per-value calls")


def checked_function(callee: dict, row_functions: list[dict]) -> Optional[dict]:
    """The profile's verdict on the function holding the callee's line (the closest def above it)."""
    same_file = [f for f in row_functions if f.get("file") == callee["file"] and f["line"] <= callee["line"]]
    return max(same_file, key=lambda f: f["line"], default=None)


def rowwise_advice(callback: dict, row_functions: list[dict]) -> dict:
    """Advice for one row-wise callback found by the profiler (caller and callee lines)."""
    caller, callee = callback["caller"], callback["callee"]
    checked = checked_function(callee, row_functions)
    status = checked["status"] if checked else "unsupported"
    if status == "equal":
        suggestion = checked["rewrite"].rstrip() + f"\n# then call {checked['name']}_columns on the frame (or series) instead"
        note = "rewritten by advisor and equal to the row-wise values on a sample; the vectorise recipe measures it"
    elif status == "differs":
        suggestion = checked["rewrite"].rstrip()
        note = f"advisor's rewrite changes values ({checked['detail']}): not trialled; rewrite it by hand"
    else:
        suggestion = TEMPLATE
        note = f"advisor cannot rewrite it: {checked['detail'] if checked else 'the row function was not found'}"
    return {
        "kind": "vectorise",
        "verified": False,
        "status": status,
        "where": f"{Path(caller['file']).name}:{caller['line']}",
        "code": caller["code"],
        "row_function": f"{Path(callee['file']).name}:{callee['line']}",
        "share_of_transform": caller["inclusive_share"],
        "suggestion": suggestion,
        "note": note,
    }


def advice_for(hotspots: dict, row_functions: Optional[list[dict]] = None) -> list[dict]:
    return [rowwise_advice(callback, row_functions or []) for callback in (hotspots.get("callbacks") or [])[:1]]


HEADROOM = 0.9  # the share of the GPU's memory a larger batch may fill: the rest for the allocator's slack
STATE_BYTES_PER_PARAMETER = 16  # float32 weights, gradients and two optimizer moments (Adam's): what a batch does not scale


def larger_batch(batch_size: int, peak_mb: float, parameters: int, total_mb: float) -> Optional[dict]:
    """The largest batch, in doublings, whose memory fits the GPU: the model's state stays, the
    rest of the peak (activations) grows with the batch. Advice only: a larger batch changes the
    optimisation (learning rate, steps per epoch), so it is never trialled. None where not even
    twice the batch fits, or the readings are missing."""
    if not (batch_size and peak_mb and total_mb):
        return None
    state_mb = min(peak_mb, parameters * STATE_BYTES_PER_PARAMETER / 2**20)
    per_batch_mb = peak_mb - state_mb
    factor = 1
    while state_mb + per_batch_mb * factor * 2 <= HEADROOM * total_mb and factor < 64:
        factor *= 2
    if factor == 1:
        return None
    return {"batch_size": batch_size * factor, "factor": factor, "memory_mb": state_mb + per_batch_mb * factor,
            "total_mb": total_mb}


def larger_batch_line(found: dict, batch_size: int) -> str:
    return (f"a batch of {found['batch_size']:,} ({found['factor']}x {batch_size:,}) would use about "
            f"{found['memory_mb']:,.0f} MB of the GPU's {found['total_mb']:,.0f} MB (the activations grow with the "
            "batch): advice, not tried, since a larger batch changes the optimisation (scale the learning rate "
            "with it, and expect fewer steps an epoch)")
