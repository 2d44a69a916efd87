"""Plans: flat mappings of dotted keys, the contract of recommendations.

The same key names are Optuna parameter names and MLflow params. A plan is a plain dict so it
travels as JSON to child processes, into Optuna and into MLflow unchanged; treat it as immutable
and derive new plans with `with_changes`.
"""

from __future__ import annotations

from typing import Any, Optional

from advisor.config import AdvisorConfig

Plan = dict[str, Any]

PLAN_KEYS = (
    "dataloader.num_workers",
    "dataloader.prefetch_factor",
    "dataloader.pin_memory",
    "dataloader.persistent_workers",
    "threads.intra_op",
    "threads.inter_op",
    "amp.dtype",
    "compile.mode",
    "checkpointing.share",
    "grad_accumulation.micro_batches",
    "batch_size",
    "inference_mode.enabled",
    "warmup.requests",
    "dynamic_batching.max_batch",
    "dynamic_batching.max_wait_ms",
    "quantize_dynamic.dtype",
    "channels_last.enabled",
    "pipeline.vectorise",
    "pipeline.format",
    "pipeline.engine",
    "pipeline.dtype_backend",
    "pipeline.categories",
    "pipeline.columns",
    "pipeline.parquet_cache",
    "pipeline.chunksize",
    "pipeline.dask_workers",
    "pipeline.dask_scheduler",
    "pipeline.dask_partitions",
)


def baseline_plan(config: AdvisorConfig, seen: Optional[dict] = None) -> Plan:
    """What the user runs today: the config's own settings, no fixes applied (`seen`: what the
    baseline's runs saw, for the settings only the user's code holds, such as a Lightning loader's)."""
    from advisor.kinds import kind_of

    return kind_of(config.kind).baseline_plan(config, seen)


def source_format_of(source) -> str:
    """The source's format, as declared or as its path's suffix says (csv when it cannot tell)."""
    if source.format:
        return source.format
    suffix = source.path.rsplit(".", 1)[-1].lower()
    return {"parquet": "parquet", "pq": "parquet", "jsonl": "jsonl", "json": "jsonl"}.get(suffix, "csv")


def with_changes(plan: Plan, **changes: Any) -> Plan:
    """A copy of `plan` with dotted keys given as `dataloader__num_workers=4` style keywords."""
    updated = dict(plan)
    updated.update({key.replace("__", "."): value for key, value in changes.items()})
    return updated
