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
    "batch_size",
)


def baseline_plan(config: AdvisorConfig) -> Plan:
    """What the user runs today: the config's own settings, no fixes applied."""
    workload = config.workload
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
        "batch_size": workload.batch_size,
    }


def with_changes(plan: Plan, **changes: Any) -> Plan:
    """A copy of `plan` with dotted keys given as `dataloader__num_workers=4` style keywords."""
    updated = dict(plan)
    updated.update({key.replace("__", "."): value for key, value in changes.items()})
    return updated
