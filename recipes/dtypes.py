"""Compact dtypes: Arrow-backed columns, and categoricals for low-cardinality text. Both cut
memory; Arrow-backed columns also skip the conversion to NumPy after an Arrow parse. Arrow's
missing text is NA, not pandas' NaN, so where text has missing values only categories are tried."""

from __future__ import annotations

from advisor.recipes.base import Choice, Context, Recipe, reader


def why_not(context: Context):
    if context.missing_text_columns and not context.category_columns:
        return arrow_changes_missing(context)
    return None


def arrow_changes_missing(context: Context) -> str:
    return (f"text columns with missing values ({', '.join(context.missing_text_columns)}) read as Arrow strings "
            "are NA, not NaN: a comparison with them is missing rather than false, which changes results")


def space(context: Context) -> dict:
    params = {} if context.missing_text_columns else {"pipeline.dtype_backend": Choice((None, "pyarrow"))}
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
    plan = {} if context.missing_text_columns else {"pipeline.dtype_backend": "pyarrow"}
    if context.category_columns:
        plan["pipeline.categories"] = ",".join(context.category_columns)
    return plan


def read_options(options: dict, plan: dict, fmt: str) -> dict:
    """Arrow-backed columns from any reader; categories from the CSV reader itself."""
    options = dict(options)
    if plan.get("pipeline.dtype_backend"):
        options["dtype_backend"] = plan["pipeline.dtype_backend"]
    categories = plan.get("pipeline.categories")
    if categories and fmt == "csv":
        options["dtype"] = {**options.get("dtype", {}), **{name: "category" for name in categories.split(",")}}
    return options


def after_read(frame, plan: dict, fmt: str):
    """Categories for what the reader cannot type itself (JSON lines, Parquet)."""
    categories = plan.get("pipeline.categories")
    if categories and fmt != "csv":
        return frame.astype({name: "category" for name in categories.split(",") if name in frame.columns})
    return frame


RECIPE = Recipe(
    name="dtypes",
    summary="Arrow-backed and categorical dtypes",
    targets=("parse", "memory"),
    risk="tolerance",  # the values compare equal; the dtypes differ
    keys=("pipeline.dtype_backend", "pipeline.categories"),
    why_not=why_not,
    space=space,
    snippet=snippet,
    textbook=textbook,
    kinds=("pipeline",),
    hooks={"read_options": read_options, "after_read": after_read},
)
