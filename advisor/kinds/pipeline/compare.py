"""The pipeline kind's numerics: each plan's output frame against the baseline's."""

from __future__ import annotations

import math
from typing import Optional

from advisor.frames import plain_difference, read_kept, shape_difference, tabular
from advisor.verify import NumericsResult


def compare_frames(candidate: Optional[str], baseline: Optional[str], risk: str, rtol: float,
                   order_matters: bool) -> NumericsResult:
    """Compares two pipeline outputs (Parquet files): the same columns and rows, text and
    integers equal, floats within `rtol`; as sets of rows where order does not matter. Dtypes
    may differ (Arrow-backed, categorical): the values are what must match."""
    if not candidate or not baseline:
        return NumericsResult(False, risk, math.inf, rtol, 0, "no output to compare")
    try:
        mine, theirs = read_kept(candidate), read_kept(baseline)
    except (OSError, ValueError) as exc:  # pyarrow's errors for a file that is not Parquet are ValueErrors
        return NumericsResult(False, risk, math.inf, rtol, 0, f"a kept output is not a readable Parquet file ({exc})"[:300])
    misshapen = shape_difference(mine, theirs)
    if misshapen:
        return NumericsResult(False, risk, math.inf, rtol, 0, misshapen)
    mine, theirs = tabular(mine), tabular(theirs)
    if not order_matters:
        exact = [c for c in mine.columns if mine[c].dtype != "float64"]
        keys = exact + [c for c in mine.columns if c not in exact]
        mine = mine.sort_values(keys, kind="mergesort", ignore_index=True)
        theirs = theirs.sort_values(keys, kind="mergesort", ignore_index=True)
    worst, problem = plain_difference(mine, theirs, rtol)
    return NumericsResult(problem is None, risk, worst, rtol, len(mine), problem or "")
