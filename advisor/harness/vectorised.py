"""The `vectorise` recipe at run time: the user's row-wise callbacks answered by their rewrites.

While the user's transform runs, `DataFrame.apply(f, axis=1)`, `Series.apply(f)` and
`Series.map(f)` of a function the plan names (`file.py:line`, as the profile found it) call
the function's column form instead (`advisor.vectorise`), built once from the user's source
with the user's own globals. Any other call, or one with arguments the rewrite does not cover,
runs as written. The user's files are read, never written; the transform is wrapped, not
edited, so the wrapper travels to Dask's workers with it.
"""

from __future__ import annotations

import ast
import difflib
import functools
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from advisor.frames import checked, comparable, first_difference, frame_difference
from advisor.vectorise import Rewrite, Unsupported, column_loops, function_at, rewrite, rewrite_loops


def where(file: str, line: int) -> str:
    """How the plan names a function or loop: `file.py:line`."""
    return f"{Path(file).name}:{line}"


def locator(code) -> str:
    return where(code.co_filename, code.co_firstlineno)


def source_of(function: Callable) -> tuple[Any, str]:
    """The AST node of the function (def or lambda) and the text of its file."""
    code = function.__code__
    source = Path(code.co_filename).read_text()
    return function_at(source, code.co_firstlineno), source


def executed(text: str, name: str, like: Callable) -> Callable:
    """The function `name` defined by `text`, run with `like`'s globals and closure (and np, pd)."""
    code = like.__code__
    namespace: dict[str, Any] = {"np": np, "pd": pd, **like.__globals__}
    namespace.update({free: cell.cell_contents for free, cell in zip(code.co_freevars, like.__closure__ or ())})
    exec(compile(text, f"<advisor: {name}>", "exec"), namespace)
    return namespace[name]


def columns_function(function: Callable, mode: str) -> tuple[Rewrite, Callable]:
    """The rewrite of `function` over columns, and that rewrite as a function to call."""
    node, source = source_of(function)
    if node is None:
        raise Unsupported(f"no function at {locator(function.__code__)}")
    written = rewrite(node, source, mode)
    return written, executed(written.text, written.columns_name, function)


def as_series(result: Any, like: pd.Series | pd.DataFrame, name: Optional[str]) -> pd.Series:
    """The column form's result as the row-wise call returns it: a series on the input's index."""
    if isinstance(result, pd.Series):
        return result.rename(name) if result.name != name else result
    return pd.Series(result if np.ndim(result) else [result] * len(like), index=like.index, name=name)


def with_vectorised(transform: Callable, targets: str) -> Callable:
    """`transform`, calling the column forms of the functions at `targets` ("a.py:10,a.py:24"),
    with its own loops at `targets` replaced by theirs."""
    wanted = frozenset(targets.split(","))
    transform = transform_with_loops(transform, wanted)

    @functools.wraps(transform)
    def vectorised_transform(frame: pd.DataFrame):
        with callbacks_vectorised(wanted):
            return transform(frame)

    return vectorised_transform


def transform_source(transform: Callable) -> tuple[Optional[ast.FunctionDef], str]:
    node, source = source_of(transform)
    return (node if isinstance(node, ast.FunctionDef) else None), source


def transform_with_loops(transform: Callable, wanted) -> Callable:
    """The transform with its own itertuples/iterrows loops on the wanted lines over columns."""
    node, source = transform_source(transform)
    if node is None:
        return transform
    lines = {loop.lineno for loop in column_loops(node) if where(transform.__code__.co_filename, loop.lineno) in wanted}
    return executed(rewrite_loops(node, source, lines), transform.__name__, transform) if lines else transform


def loop_verdicts(transform: Callable, sample: pd.DataFrame, rtol: float) -> list[dict]:
    """Each loop of the transform that builds a column row by row: its rewrite, and whether the
    transform with it gives the same output on `sample` (else the first difference)."""
    try:
        node, source = transform_source(transform)
    except (OSError, SyntaxError, AttributeError):
        return []
    found = []
    for loop in column_loops(node) if node is not None else []:
        at = where(transform.__code__.co_filename, loop.lineno)
        entry = {"where": at, "file": transform.__code__.co_filename, "line": loop.lineno,
                 "name": f"the {loop.iter.func.attr} loop in {node.name}", "mode": "loop"}
        try:
            text = rewrite_loops(node, source, {loop.lineno})
        except Unsupported as problem:
            found.append({**entry, "status": "unsupported", "detail": str(problem)})
            continue
        original = "\n".join(source.splitlines()[node.lineno - 1:node.end_lineno]) + "\n"
        entry.update(rewrite=text, diff="".join(difflib.unified_diff(
            original.splitlines(True), text.splitlines(True), f"{at} (yours)", f"{node.name} (advisor's)")))
        try:
            expected = comparable(checked(transform(sample.copy())))
            got = comparable(checked(executed(text, transform.__name__, transform)(sample.copy())))
        except Exception as error:
            found.append({**entry, "status": "differs", "detail": f"the rewrite raised {type(error).__name__}: {error}"})
            continue
        difference = frame_difference(got, expected, rtol, "the row-wise code's")
        found.append({**entry, "status": "differs" if difference else "equal", "detail": difference or ""})
    return found


class callbacks_vectorised:
    """Patches pandas' per-row entry points for the duration of the transform, in this process.

    With `wanted`, the functions there are answered by their column forms. With `check` (a
    callable deciding whether a file is the user's), every user function called row by row
    runs as written, and its column form is computed beside it and compared: `found` then holds
    each function's verdict (the same values, the first row that differs, or the construct the
    rewriter cannot express)."""

    def __init__(self, wanted: frozenset = frozenset(), check: Optional[Callable[[str], bool]] = None,
                 rtol: float = 1e-9):
        self.wanted, self.check, self.rtol = wanted, check, rtol
        self.built: dict = {}
        self.found: dict[str, dict] = {}

    def column_form(self, function: Any, mode: str) -> Optional[Callable]:
        code = getattr(function, "__code__", None)
        if code is None or locator(code) not in self.wanted:
            return None
        if (code, mode) not in self.built:
            self.built[(code, mode)] = columns_function(function, mode)[1]
        return self.built[(code, mode)]

    def answer(self, function: Any, mode: str, data, name, as_written: Callable[[], Any]):
        if self.check is None:
            form = self.column_form(function, mode)
            return as_series(form(data), data, name) if form else as_written()
        expected = as_written()
        code = getattr(function, "__code__", None)
        if code is not None and self.check(code.co_filename) and locator(code) not in self.found:
            self.found[locator(code)] = self.verdict(function, mode, data, name, expected)
        return expected

    def verdict(self, function, mode: str, data, name, expected) -> dict:
        code = function.__code__
        entry = {"where": locator(code), "file": code.co_filename, "line": code.co_firstlineno,
                 "name": code.co_name, "mode": mode}
        try:
            written, form = columns_function(function, mode)
        except (Unsupported, OSError, SyntaxError) as problem:
            return {**entry, "status": "unsupported", "detail": str(problem)}
        entry.update(rewrite=written.text, diff=written.diff(locator(code)))
        try:
            got = as_series(form(data), data, name)
        except Exception as error:  # the column form fails where the row-wise code did not
            return {**entry, "status": "differs", "detail": f"the rewrite raised {type(error).__name__}: {error}"}
        difference = first_difference(got, expected, self.rtol, "the row-wise code's")
        return {**entry, "status": "differs" if difference else "equal", "detail": difference or ""}

    def __enter__(self):
        self.saved = pd.DataFrame.apply, pd.Series.apply, pd.Series.map
        frame_apply, series_apply, series_map = self.saved
        forms = self

        def apply_rows(frame, func, axis=0, *args, **kwargs):
            if axis not in (1, "columns") or args or kwargs:
                return frame_apply(frame, func, axis, *args, **kwargs)
            return forms.answer(func, "row", frame, None, lambda: frame_apply(frame, func, axis))

        def apply_values(series, func, *args, **kwargs):
            if args or kwargs:
                return series_apply(series, func, *args, **kwargs)
            return forms.answer(func, "value", series, series.name, lambda: series_apply(series, func))

        def map_values(series, arg, na_action=None, **kwargs):
            if na_action is not None or kwargs or not callable(arg):
                return series_map(series, arg, na_action, **kwargs)
            return forms.answer(arg, "value", series, series.name, lambda: series_map(series, arg))

        pd.DataFrame.apply, pd.Series.apply, pd.Series.map = apply_rows, apply_values, map_values
        return self

    def __exit__(self, *exc):
        pd.DataFrame.apply, pd.Series.apply, pd.Series.map = self.saved
