"""The pyarrow parser for CSV and JSON lines: multi-threaded and written in C++, where pandas'
default JSON reader goes through Python objects and its CSV reader uses one core."""

from __future__ import annotations

from typing import Optional

from advisor.recipes.base import Choice, Context, Recipe, reader


def why_not(context: Context) -> Optional[str]:
    if context.source_format not in ("csv", "jsonl"):
        return f"the source is {context.source_format or 'not text'}: there is no text to parse"
    return None


def snippet(plan: dict) -> str:
    return "frame = " + reader(plan, 'engine="pyarrow"')


def read_options(options: dict, plan: dict, fmt: str) -> dict:
    """The parser for a text source (Parquet has none to choose)."""
    if plan.get("pipeline.engine") and fmt != "parquet":
        return {**options, "engine": plan["pipeline.engine"]}
    return options


RECIPE = Recipe(
    name="arrow_engine",
    summary="parse text sources with the pyarrow engine",
    targets=("parse",),
    risk="tolerance",  # a float's last digit may round differently
    keys=("pipeline.engine",),
    why_not=why_not,
    space=lambda context: {"pipeline.engine": Choice((None, "pyarrow"))},
    snippet=snippet,
    textbook=lambda context: {"pipeline.engine": "pyarrow"},
    kinds=("pipeline",),
    hooks={"read_options": read_options},
)
