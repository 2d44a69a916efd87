"""Compact dtypes: Arrow-backed columns, and categoricals for low-cardinality text. Both cut
memory; Arrow-backed columns also skip the conversion to NumPy after an Arrow parse."""

from __future__ import annotations

from recipes.base import Choice, Context, Recipe, reader


def space(context: Context) -> dict:
    params = {"pipeline.dtype_backend": Choice((None, "pyarrow"))}
    if context.category_columns:
        params["pipeline.categories"] = Choice((None, ",".join(context.category_columns)))
    return params


def snippet(plan: dict) -> str:
    options = []
    if plan.get("pipeline.dtype_backend"):
        options.append(f'dtype_backend="{plan["pipeline.dtype_backend"]}"')
    categories = "{" + ", ".join(f'"{c}": "category"' for c in (plan.get("pipeline.categories") or "").split(",") if c) + "}"
    if plan.get("pipeline.categories") and plan.get("pipeline.format") == "csv":
        options.append(f"dtype={categories}")
    code = f"frame = {reader(plan, *options)}"
    if plan.get("pipeline.categories") and plan.get("pipeline.format") != "csv":
        code += f"\nframe = frame.astype({categories})"
    return code


def textbook(context: Context) -> dict:
    plan = {"pipeline.dtype_backend": "pyarrow"}
    if context.category_columns:
        plan["pipeline.categories"] = ",".join(context.category_columns)
    return plan


RECIPE = Recipe(
    name="dtypes",
    summary="Arrow-backed and categorical dtypes",
    targets=("parse", "memory"),
    risk="tolerance",  # the values compare equal; the dtypes differ
    keys=("pipeline.dtype_backend", "pipeline.categories"),
    why_not=lambda context: None,
    space=space,
    snippet=snippet,
    textbook=textbook,
    kinds=("pipeline",),
)
