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
