"""Plans: flat mappings of dotted keys, the contract of recommendations.

The same key names are Optuna parameter names and MLflow params. A plan is a plain dict so it
travels as JSON to child processes, into Optuna and into MLflow unchanged; treat it as immutable
and derive new plans with `with_changes`.

This module is the one home of a plan's identity (`plan_key`): the search, the session and
tracking all compare plans by it. A leaf: it reads the recipes' declarations and nothing of
advisor above it.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from advisor.recipes import RECIPES, Recipe, by_name

Plan = dict[str, Any]

RISK_ORDER = {"exact": 0, "tolerance": 1, "changes semantics": 2}

# Every plan key: the batch size and the pipeline's source format (not tuned: the snippets'
# reader), then each recipe's own keys.
PLAN_KEYS: tuple[str, ...] = tuple(dict.fromkeys(("batch_size", "pipeline.format",
                                                  *(key for recipe in RECIPES for key in recipe.keys))))


def idle_keys(plan: Plan) -> frozenset:
    """The plan's keys that do nothing under it, as each recipe declares them (prefetch without
    workers, a batcher's wait without batches, the parser under a Parquet cache, buckets under PowerSGD)."""
    return frozenset().union(*(recipe.idle(plan) for recipe in RECIPES))


def effective(plan: Plan) -> Plan:
    """The plan with the keys that do nothing removed."""
    idle = idle_keys(plan)
    return {key: value for key, value in plan.items() if key not in idle}


def plan_key(plan: Plan) -> str:
    """What a plan does, as text: two plans with the same key run the same job."""
    return json.dumps(effective(plan), sort_keys=True, default=str)


def unique(plans: list[Plan], baseline: Optional[Plan] = None) -> list[Plan]:
    """The plans in order (each read on top of `baseline`, when given), each that does what an
    earlier one does left out."""
    seen, kept = set(), []
    for plan in plans:
        key = plan_key({**(baseline or {}), **plan})
        if key not in seen:
            seen.add(key)
            kept.append(plan)
    return kept


def changes_of(plan: Plan, baseline: Plan) -> Plan:
    """What a plan changes from the baseline, keys that do nothing left out."""
    return {k: v for k, v in effective(plan).items() if v != baseline.get(k)}


def changes_text(changes: Plan) -> str:
    """A plan's changes as a user reads them: key=value, comma-separated."""
    return ", ".join(f"{key}={value}" for key, value in changes.items())


def active_recipes(plan: Plan, baseline: Plan) -> tuple[Recipe, ...]:
    """The recipes whose keys the plan changes, in effect, from the baseline (a key idle under
    the plan is as the baseline has it)."""
    idle, base = idle_keys(plan), effective(baseline)
    as_run = {key: base.get(key) if key in idle else value for key, value in plan.items()}
    return tuple(r for r in RECIPES if r.active(as_run, base))


def without_recipe(plan: dict, baseline: dict, recipe: str) -> dict:
    """The plan with one recipe's keys as the baseline has them; a key the baseline lacks (a
    service's inter-op threads, on a training job) is left out."""
    changed = dict(plan)
    for key in by_name(recipe).keys:
        if key in baseline:
            changed[key] = baseline[key]
        else:
            changed.pop(key, None)
    return changed


def names(recipes: tuple[Recipe, ...]) -> tuple[str, ...]:
    return tuple(r.name for r in recipes)


def combined_risk(recipes: tuple[Recipe, ...]) -> str:
    """The riskiest of the recipes' risks ("exact" for none)."""
    return max((r.risk for r in recipes), key=RISK_ORDER.__getitem__, default="exact")


def with_changes(plan: Plan, **changes: Any) -> Plan:
    """A copy of `plan` with dotted keys given as `dataloader__num_workers=4` style keywords."""
    updated = dict(plan)
    updated.update({key.replace("__", "."): value for key, value in changes.items()})
    return updated
