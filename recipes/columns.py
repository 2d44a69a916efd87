"""Column pruning: read only the columns the transform reads. Which ones is detected, not
guessed: the profile run drops each column in turn from a sample and keeps those whose absence
breaks or changes the transform's output."""

from __future__ import annotations

from typing import Optional

from advisor.recipes.base import Choice, Context, Recipe, reader


def used(context: Context) -> str:
    return ",".join(context.used_columns)


def why_not(context: Context) -> Optional[str]:
    if not context.used_columns or len(context.used_columns) >= len(context.columns):
        return "the transform reads every column"
    return None


def snippet(plan: dict) -> str:
    names = plan["pipeline.columns"].split(",")
    if plan.get("pipeline.format") == "jsonl":  # the JSON reader cannot skip fields
        return f"columns = {names!r}\nframe = {reader(plan)}[columns]"
    option = "columns=columns" if plan.get("pipeline.format") == "parquet" else "usecols=columns"
    return f"columns = {names!r}\nframe = {reader(plan, option)}"


def read_options(options: dict, plan: dict, fmt: str) -> dict:
    """Only the used columns, where the reader can skip the others (not JSON lines)."""
    names = plan.get("pipeline.columns")
    option = {"parquet": "columns", "csv": "usecols"}.get(fmt)
    return {**options, option: names.split(",")} if names and option else options


def after_read(frame, plan: dict, fmt: str):
    """JSON lines are read whole: their unused fields are dropped after the read."""
    names = plan.get("pipeline.columns")
    return frame[names.split(",")] if names and fmt == "jsonl" else frame


RECIPE = Recipe(
    name="columns",
    summary="read only the columns the transform uses",
    targets=("parse", "io", "memory"),
    risk="exact",
    keys=("pipeline.columns",),
    why_not=why_not,
    space=lambda context: {"pipeline.columns": Choice((None, used(context)))},
    snippet=snippet,
    textbook=lambda context: {"pipeline.columns": used(context)},
    kinds=("pipeline",),
    hooks={"read_options": read_options, "after_read": after_read},
)
