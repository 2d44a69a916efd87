"""A Parquet cache of a text source: parse once, then read columnar binary on every later run.
The one-off cost, and the number of runs after which it pays off, are reported with it."""

from __future__ import annotations

import math
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


def cache_cost(runs: list, reference_runs: list, per: str = "run") -> dict:
    """The cache's one-off build time, and the runs after which it has paid for itself."""
    build = max((r.stages.get("cache_build_s", {}).get("wall_s", 0.0) for r in runs if r.ok), default=0.0)
    saved = _mean_wall(reference_runs) - _mean_wall(runs)
    return {"cache": {"build_s": build, "pays_off_after_runs": math.ceil(build / saved) if saved > 0 else None}}


def _mean_wall(runs: list) -> float:
    good = [r.stages["wall_s"] for r in runs if r.ok and r.stages]
    return sum(good) / len(good) if good else 0.0


RECIPE = Recipe(
    name="parquet_cache",
    summary="cache the parsed source as Parquet",
    targets=("parse", "io"),
    risk="exact",
    keys=("pipeline.parquet_cache",),
    idle=lambda plan: frozenset({"pipeline.engine"} if plan.get("pipeline.parquet_cache") else ()),  # no text to parse
    why_not=why_not,
    space=lambda context: {"pipeline.parquet_cache": Choice((False, True))},
    snippet=snippet,
    textbook=lambda context: {"pipeline.parquet_cache": True},
    kinds=("pipeline",),
    one_off_cost=cache_cost,
)
