"""The fixes advisor knows, listed statically: one module per recipe, read top to bottom.

A recipe also says how it applies to a run, through named hooks (`Recipe.hooks`) that the
measurement loops call here, never reading a recipe's plan keys themselves. Each hook is called
for every recipe that has it, in this registry's order, with the whole plan: a recipe whose keys
are at the baseline's settings (or absent, in another kind's plan) leaves the run as it is.

Folds, `applied(hook, value, plan, **facts)`, each recipe's `(value, plan, **facts) -> value`:
  process         None; in the child before anything is built (threads, allocator, tf32,
                  cudnn_benchmark)
  model           the model, on its device, before its optimizer sees it (checkpointing,
                  dynamic quantization, channels_last)
  optimizer       the optimizer advisor made from the config, before its first step (fused_optimizer)
  compiled        the model once its optimizer exists; fact `in_place` (compile)
  grad_scaler     None, or a loss scaler; fact `device_type` (amp's float16)
  micro_batches   1: the parts each batch runs in (grad_accumulation)
  loader          the DataLoader's keyword options; fact `cuda` (dataloader)
  dataset         the dataset the DataLoader reads (fetch_threads)
  queued_batches  0: the batches the loader's workers can hold ready (dataloader)
  non_blocking    False: whether copies to the device may be asynchronous (dataloader)
  batch           a training batch on its device (channels_last)
  request         a served request (channels_last), as `chain`
  batching        (1, 0.0): a server's largest batch and its wait in seconds (dynamic_batching)
  warm_requests   0: requests served at load time (warmup)
  instances       (1, "thread"): model instances serving side by side, threads or processes (serving)
  ddp             DistributedDataParallel's keyword options (ddp_buckets, ddp_bucket_view,
                  ddp_static_graph, ddp_unused)
  comm_hook       None, or the (state, hook) DistributedDataParallel communicates through (comm_hook)
  failure         "": words naming recipes whose mix a crash comes from; fact `text`
  prepare         a pipeline's `PipelineRun`, before it reads (vectorise, parquet_cache)
  read_options    the pandas reader's keyword options; fact `fmt` (arrow_engine, columns, dtypes)
  after_read      a frame just read; fact `fmt` (columns, dtypes)
  execute         None, or how a pipeline's run is carried out (chunked, dask)
Contexts, `around(hook, plan, **facts)`, each recipe's `(plan, **facts) -> context manager`:
  around_forward  a training step's forward; fact `device_type` (amp)
  around_serve    a served call; fact `device_type` (amp, inference_mode)
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager

from advisor.recipes import (
    allocator,
    amp,
    arrow_engine,
    channels_last,
    checkpointing,
    chunked,
    columns,
    comm_hook,
    compile,
    cudnn_benchmark,
    dask,
    dataloader,
    ddp_bucket_view,
    ddp_buckets,
    ddp_static_graph,
    ddp_unused,
    dtypes,
    dynamic_batching,
    fetch_threads,
    fused_optimizer,
    grad_accumulation,
    inference_mode,
    parquet_cache,
    quantize_dynamic,
    serving,
    tf32,
    threads,
    vectorise,
    warmup,
)
from advisor.recipes.base import Choice, Context, IntRange, Param, Recipe

RECIPES: tuple[Recipe, ...] = (
    dataloader.RECIPE,
    fetch_threads.RECIPE,
    threads.RECIPE,
    allocator.RECIPE,
    amp.RECIPE,
    checkpointing.RECIPE,
    grad_accumulation.RECIPE,
    compile.RECIPE,
    # CUDA (tf32 and cudnn_benchmark serve too; channels_last, listed with the services, trains too)
    tf32.RECIPE,
    cudnn_benchmark.RECIPE,
    fused_optimizer.RECIPE,
    # data-parallel training (the training recipes apply too)
    ddp_buckets.RECIPE,
    ddp_bucket_view.RECIPE,
    ddp_static_graph.RECIPE,
    ddp_unused.RECIPE,
    comm_hook.RECIPE,
    # inference (amp, compile and threads apply too)
    inference_mode.RECIPE,
    warmup.RECIPE,
    dynamic_batching.RECIPE,
    serving.RECIPE,
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

__all__ = ["RECIPES", "Choice", "Context", "IntRange", "Param", "Recipe", "applied", "around", "by_name", "chain",
           "fixes_for", "settings_off"]


def by_name(name: str) -> Recipe:
    for recipe in RECIPES:
        if recipe.name == name:
            return recipe
    raise KeyError(name)


def settings_off(family: str, taken: tuple[str, ...] = ()) -> dict:
    """The keys of every recipe that applies to a family of workloads, each at the setting that
    applies nothing (`Recipe.off`): a baseline's fixes, all off. The recipes named in `taken` are
    left out: their settings are the job's own (the user's loader, their threads), read from it."""
    return {key: value for recipe in RECIPES if family in recipe.kinds and recipe.name not in taken
            for key, value in recipe.settings_off().items()}


def fixes_for(bottleneck: str, family: str, first: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The recipes that target a bottleneck in a family of workloads (`Recipe.targets`), in the
    registry's order after `first`, the ones a rule names as the likeliest for its evidence."""
    targeting = [recipe.name for recipe in RECIPES if bottleneck in recipe.targets and family in recipe.kinds]
    return tuple(dict.fromkeys([name for name in first if name in targeting] + targeting))


# The hooks above, by kind: folds take and return a value, contexts are entered around a call.
FOLDS = frozenset({"process", "model", "optimizer", "compiled", "grad_scaler", "micro_batches", "loader", "dataset",
                   "queued_batches", "non_blocking", "batch", "ddp", "comm_hook", "request", "batching", "warm_requests",
                   "instances", "failure", "prepare", "read_options", "after_read", "execute"})
CONTEXTS = frozenset({"around_forward", "around_serve"})


def chain(hook: str, plan: dict, **facts: Any) -> Callable[[Any], Any]:
    """Every recipe's `hook` for this plan, as one function of the value: resolved once, called often."""
    steps = [apply for recipe in RECIPES if (apply := recipe.hooks.get(hook)) is not None]

    def apply_all(value: Any) -> Any:
        for apply in steps:
            value = apply(value, plan, **facts)
        return value

    return apply_all


def applied(hook: str, value: Any, plan: dict, **facts: Any) -> Any:
    """`value` passed through every recipe's `hook`, in the registry's order."""
    return chain(hook, plan, **facts)(value)


def around(hook: str, plan: dict, **facts: Any) -> Callable[[], ContextManager]:
    """A fresh context, on each call, that enters every recipe's `hook` context in the registry's order."""
    makers = [make for recipe in RECIPES if (make := recipe.hooks.get(hook)) is not None]

    @contextlib.contextmanager
    def entered():
        with contextlib.ExitStack() as stack:
            for make in makers:
                stack.enter_context(make(plan, **facts))
            yield

    return entered
