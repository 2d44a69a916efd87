"""A Parquet cache of a text source: parse once, then read columnar binary on every later run.
The one-off cost, and the number of runs after which it pays off, are reported with it."""

from __future__ import annotations

from typing import Optional

from recipes.base import Choice, Context, Recipe, reader


def why_not(context: Context) -> Optional[str]:
    if context.source_format == "parquet":
        return "the source is already Parquet"
    return None


def snippet(plan: dict) -> str:
    return ('cache = Path("source.parquet")  # once, and again whenever the source changes:\n'
            "if not cache.exists():\n"
            f"    {reader(plan)}.to_parquet(cache)  # the same reader and arguments as today\n"
            "frame = pd.read_parquet(cache)")


RECIPE = Recipe(
    name="parquet_cache",
    summary="cache the parsed source as Parquet",
    targets=("parse", "io"),
    risk="exact",
    keys=("pipeline.parquet_cache",),
    why_not=why_not,
    space=lambda context: {"pipeline.parquet_cache": Choice((False, True))},
    snippet=snippet,
    textbook=lambda context: {"pipeline.parquet_cache": True},
    kinds=("pipeline",),
)
