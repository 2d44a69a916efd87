"""DataLoader tuning: worker processes, prefetch depth, persistent workers, pinned memory.

Workers load and prepare batches in parallel with the training step. For fetch stalls the
space reaches past the core count: a worker waiting on storage costs no CPU.
"""

from __future__ import annotations

from typing import Optional

from advisor.recipes.base import Choice, Context, IntRange, Recipe, at_call

FETCH_WORKERS_PER_CORE = 4  # workers blocked on I/O are cheap; let the search find how many
MIN_FETCH_WORKERS = 8


def max_workers(context: Context) -> int:
    if "input-fetch" in context.bottlenecks:
        return max(MIN_FETCH_WORKERS, FETCH_WORKERS_PER_CORE * context.cores)
    return max(2, context.cores)


def space(context: Context) -> dict:
    params = {
        "dataloader.num_workers": IntRange(0, max_workers(context)),
        "dataloader.prefetch_factor": Choice((2, 4, 8)),
        "dataloader.persistent_workers": Choice((False, True)),
    }
    if context.device == "cuda":  # pinned host memory only speeds copies to a GPU
        params["dataloader.pin_memory"] = Choice((False, True))
    return params


def why_not(context: Context) -> Optional[str]:
    if context.kind == "script" and not context.loader_call:
        return "the script builds no torch DataLoader: its batches come from its own code"
    return None


def snippet_in(plan: dict, context: Context) -> Optional[str]:
    """At a script's own DataLoader call: the arguments to add."""
    if not context.loader_call:
        return None
    return at_call(context.loader_call, "# set these arguments in that DataLoader(...) call:\n" + ", ".join(options_of(plan)))


def options_of(plan: dict) -> list[str]:
    workers = plan["dataloader.num_workers"]
    options = [f"num_workers={workers}"]
    if workers > 0:
        options += [
            f"prefetch_factor={plan.get('dataloader.prefetch_factor') or 2}",
            f"persistent_workers={bool(plan.get('dataloader.persistent_workers'))}",
        ]
    if plan.get("dataloader.pin_memory"):
        options.append("pin_memory=True")
    return options


def snippet(plan: dict) -> str:
    options = options_of(plan)
    pinned = plan.get("dataloader.pin_memory")
    indent = ",\n                    "
    code = "loader = DataLoader(dataset, batch_size=..., shuffle=True" + indent + indent.join(options) + ")"
    return code + ("\n# with pinned memory, copy asynchronously: x = x.to(device, non_blocking=True)" if pinned else "")


def textbook(context: Context) -> dict:
    plan = {"dataloader.num_workers": context.cores, "dataloader.prefetch_factor": 2, "dataloader.persistent_workers": True}
    if context.device == "cuda":
        plan["dataloader.pin_memory"] = True
    return plan


def idle(plan: dict) -> frozenset:
    """Prefetching and persistence belong to worker processes: without workers they do nothing."""
    if plan.get("dataloader.num_workers"):
        return frozenset()
    return frozenset({"dataloader.prefetch_factor", "dataloader.persistent_workers"})


def loader_options(options: dict, plan: dict, cuda: bool = False) -> dict:
    """The DataLoader's worker and memory options under the plan (pinned memory only with CUDA);
    a plan that does not set the workers (a script's evidence runs) leaves the loader's own."""
    if plan.get("dataloader.num_workers") is None:
        return options
    workers = int(plan["dataloader.num_workers"])
    options = {**options, "num_workers": workers, "pin_memory": bool(plan["dataloader.pin_memory"]) and cuda}
    if workers > 0:
        options["persistent_workers"] = bool(plan["dataloader.persistent_workers"])
        if plan.get("dataloader.prefetch_factor"):
            options["prefetch_factor"] = int(plan["dataloader.prefetch_factor"])
    return options


def settings_of(options: dict) -> dict:
    """A DataLoader's own worker settings (its keyword options, defaults bound), as plan keys."""
    workers = int(options["num_workers"])
    return {"dataloader.num_workers": workers,
            "dataloader.prefetch_factor": options["prefetch_factor"] if workers else None,
            "dataloader.persistent_workers": bool(options["persistent_workers"]),
            "dataloader.pin_memory": bool(options["pin_memory"])}


def queued_batches(plan: dict) -> int:
    """The batches the workers can have ready: each holds `prefetch_factor` (torch's default 2)."""
    workers = int(plan.get("dataloader.num_workers") or 0)
    return workers * int(plan.get("dataloader.prefetch_factor") or 2) if workers else 0


RECIPE = Recipe(
    name="dataloader",
    summary="load batches in parallel worker processes, ahead of the step",
    targets=("input-fetch", "input-prep", "transfer"),
    risk="exact",
    kinds=("train", "distributed", "script"),
    keys=(
        "dataloader.num_workers",
        "dataloader.prefetch_factor",
        "dataloader.persistent_workers",
        "dataloader.pin_memory",
    ),
    why_not=why_not,
    space=space,
    snippet=snippet,
    snippet_in=snippet_in,
    textbook=textbook,
    idle=idle,
    hooks={
        "loader": loader_options,
        "queued_batches": lambda queued, plan: queued_batches(plan),
        "non_blocking": lambda non_blocking, plan: non_blocking or bool(plan.get("dataloader.pin_memory")),
    },
)
