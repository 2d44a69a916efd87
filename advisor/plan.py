"""Plans: flat mappings of dotted keys, the contract of recommendations.

The same key names are Optuna parameter names and MLflow params. A plan is a plain dict so it
travels as JSON to child processes, into Optuna and into MLflow unchanged; treat it as immutable
and derive new plans with `with_changes`.
"""

from __future__ import annotations

from typing import Any

from advisor.config import AdvisorConfig

Plan = dict[str, Any]

PLAN_KEYS = (
    "dataloader.num_workers",
    "dataloader.prefetch_factor",
    "dataloader.pin_memory",
    "dataloader.persistent_workers",
    "threads.intra_op",
    "amp.dtype",
    "compile.mode",
    "checkpointing.share",
    "grad_accumulation.micro_batches",
    "batch_size",
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


def baseline_plan(config: AdvisorConfig) -> Plan:
    """What the user runs today: the config's own settings, no fixes applied."""
    workload = config.workload
    if config.kind == "pipeline":
        return {
            "pipeline.format": source_format_of(workload.source),  # not tuned: the snippets' reader
            "pipeline.engine": workload.source.read_args.get("engine"),
            "pipeline.dtype_backend": workload.source.read_args.get("dtype_backend"),
            "pipeline.categories": None,
            "pipeline.columns": None,
            "pipeline.parquet_cache": False,
            "pipeline.chunksize": None,
            "pipeline.dask_workers": None,
            "pipeline.dask_scheduler": None,
            "pipeline.dask_partitions": None,
        }
    loader = workload.dataloader
    return {
        "dataloader.num_workers": loader.num_workers,
        "dataloader.prefetch_factor": loader.prefetch_factor,
        "dataloader.pin_memory": loader.pin_memory,
        "dataloader.persistent_workers": loader.persistent_workers,
        "threads.intra_op": workload.threads,
        "amp.dtype": None,
        "compile.mode": None,
        "checkpointing.share": 0.0,
        "grad_accumulation.micro_batches": 1,
        "batch_size": workload.batch_size,
    }


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
