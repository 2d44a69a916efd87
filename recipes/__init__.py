"""The fixes advisor knows, listed statically: one module per recipe, read top to bottom."""

from __future__ import annotations

from recipes import (
    amp, arrow_engine, channels_last, checkpointing, chunked, columns, compile, dask, dataloader, dtypes, dynamic_batching,
    grad_accumulation, inference_mode, parquet_cache, quantize_dynamic, threads, vectorise, warmup,
)
from recipes.base import Choice, Context, IntRange, Param, Recipe

RECIPES: tuple[Recipe, ...] = (
    dataloader.RECIPE,
    threads.RECIPE,
    amp.RECIPE,
    checkpointing.RECIPE,
    grad_accumulation.RECIPE,
    compile.RECIPE,
    # inference (amp, compile and threads apply too)
    inference_mode.RECIPE,
    warmup.RECIPE,
    dynamic_batching.RECIPE,
    quantize_dynamic.RECIPE,
    channels_last.RECIPE,
    # pandas pipelines
    vectorise.RECIPE,
    parquet_cache.RECIPE,
    arrow_engine.RECIPE,
    columns.RECIPE,
    dtypes.RECIPE,
    chunked.RECIPE,
    dask.RECIPE,
)

__all__ = ["RECIPES", "Choice", "Context", "IntRange", "Param", "Recipe", "by_name"]


def by_name(name: str) -> Recipe:
    for recipe in RECIPES:
        if recipe.name == name:
            return recipe
    raise KeyError(name)
