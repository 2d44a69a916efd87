"""Comparing pandas frames: where two outputs first differ, in words. Pure functions.

A leaf, shared by the numerics gate (parent) and the vectorise check (child): it imports
nothing of advisor's but its errors, and pandas only when called (a training job's parent
never needs it).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

from advisor.errors import UserError

if TYPE_CHECKING:
    import pandas as pd


def checked(output, key_path: str = "workload.transform") -> "pd.DataFrame":
    import pandas as pd

    if isinstance(output, pd.Series):
        return output.to_frame()
    if not isinstance(output, pd.DataFrame):
        raise UserError(f"{key_path}: returned {type(output).__name__}, not a pandas DataFrame; return a DataFrame")
    return output


def comparable(frame: "pd.DataFrame") -> "pd.DataFrame":
    """The output as Parquet can hold it: string column names, a meaningful index kept as columns.
    An unnamed integer index is the source's row labels (a filter leaves gaps in them), which
    chunks and partitions number afresh: it is not a result, so it is dropped."""
    import pandas as pd

    frame = frame.copy()
    frame.columns = [str(c) for c in frame.columns]
    if isinstance(frame.index, pd.RangeIndex):
        return frame
    row_labels = all(name is None for name in frame.index.names) and pd.api.types.is_integer_dtype(frame.index.dtype)
    return frame.reset_index(drop=row_labels)


def keep_frame(frame: "pd.DataFrame", path) -> None:
    """Writes an output frame for the comparison as Parquet, a format that holds data and never
    code (a frame read back from disk must not run anything). Columns of Python objects Parquet
    cannot type are kept as the text the comparison reads them as (`tabular`)."""
    frame = comparable(frame)
    try:
        frame.to_parquet(path)
        return
    except (TypeError, ValueError, ImportError, ArithmeticError) as first:  # pyarrow's ArrowInvalid is a ValueError
        problem = first
    texts = {name: as_text(frame[name]) for name in frame.columns if frame[name].dtype == object}
    try:
        frame.assign(**texts).to_parquet(path)
    except (TypeError, ValueError, ArithmeticError):
        raise problem from None


def read_kept(path) -> "pd.DataFrame":
    import pandas as pd

    return pd.read_parquet(path)


def plain_difference(mine, theirs, rtol: float, reference: str = "the baseline's") -> tuple[float, Optional[str]]:
    """Two plain frames (`tabular`) of the same columns and length: the worst relative float
    difference, and the first column and row where they disagree (None when they agree)."""
    worst = 0.0
    for column in mine.columns:
        relative, problem = column_difference(mine[column], theirs[column], rtol, reference)
        if problem:
            return relative, f"column {column!r}: {problem}"
        worst = max(worst, relative)
    return worst, None


def shape_difference(mine, theirs, reference: str = "the baseline's") -> Optional[str]:
    """Two frames whose columns or row counts differ, in words; None when they match."""
    if list(mine.columns) != list(theirs.columns):
        return f"columns differ: {list(mine.columns)} vs {list(theirs.columns)}"
    if len(mine) != len(theirs):
        return f"{len(mine):,} rows against {reference} {len(theirs):,}"
    return None


def frame_difference(mine, theirs, rtol: float, reference: str = "the baseline's") -> Optional[str]:
    """Where two output frames (as `comparable` makes them) first disagree, row by row; None when they agree."""
    return shape_difference(mine, theirs, reference) or plain_difference(
        tabular(mine.reset_index(drop=True)), tabular(theirs.reset_index(drop=True)), rtol, reference)[1]


def column_difference(mine, theirs, rtol: float, reference: str = "the baseline's") -> tuple[float, Optional[str]]:
    """Two plain columns (`tabular`) of equal length: the largest relative difference of their
    floats, and where they first disagree ("row 12: 'nan' against the baseline's 'None'"),
    None when every value is equal (floats: within `rtol`)."""
    import numpy as np

    a, b = mine.to_numpy(), theirs.to_numpy()
    if mine.dtype == "float64" and theirs.dtype == "float64":
        relative = np.abs(a - b) / np.maximum(np.abs(b), 1e-300)
        bad = (np.isnan(a) != np.isnan(b)) | (relative > rtol)
        worst = float(np.nanmax(np.where(np.isnan(a) != np.isnan(b), np.inf, relative), initial=0.0))
    else:
        bad, worst = a.astype(str) != b.astype(str), 0.0
    if not bad.any():
        return worst, None
    row = int(np.argmax(bad))
    floats = mine.dtype == "float64" and theirs.dtype == "float64" and worst < math.inf
    what = f"a float differs by {worst:.2e} relative, over the {rtol:.0e} tolerance" if floats else "values differ"
    first = getattr(a[row], "item", lambda: a[row])(), getattr(b[row], "item", lambda: b[row])()
    return (worst if floats else math.inf), f"{what}; first at row {row}: {first[0]!r} against {reference} {first[1]!r}"


def first_difference(candidate, baseline, rtol: float, reference: str = "the baseline's") -> Optional[str]:
    """Where two series first disagree under the pipeline's comparison rules; None when they agree."""
    import pandas as pd

    if len(candidate) != len(baseline):  # series: their lengths (a frame's columns would name `value`)
        return f"{len(candidate):,} rows against {reference} {len(baseline):,}"
    mine = tabular(pd.DataFrame({"value": candidate.reset_index(drop=True)}))["value"]
    theirs = tabular(pd.DataFrame({"value": baseline.reset_index(drop=True)}))["value"]
    return column_difference(mine, theirs, rtol, reference)[1]


def tabular(frame):
    """Numbers as float64 (integers too: a chunked sum may come back as float), the rest as text."""
    import pandas as pd

    columns = {}
    for name in frame.columns:
        series = frame[name]
        if pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype):
            columns[name] = series.to_numpy(dtype="float64", na_value=float("nan"))
        else:
            columns[name] = as_text(series).to_numpy()
    return pd.DataFrame(columns)


def as_text(series):
    """A column as the comparison reads what is not a number: each value's text, a missing one None's."""
    return series.astype(object).where(series.notna(), None).astype(str)
