"""DistributedDataParallel's `find_unused_parameters`, turned off where the user turned it on.

With it on, DDP walks the autograd graph after every forward to find parameters that got no
gradient, and may not start a bucket's all-reduce until backward ends. Where every parameter
is used, the walk finds nothing and costs time: off, the gradients are the same (exact). Where
some parameter is unused, DDP raises with it off, and the trial counts as failed.
"""

from __future__ import annotations

from typing import Optional

from advisor.recipes.base import Choice, Context, Recipe, keyword_option


def why_not(context: Context) -> Optional[str]:
    return None if context.find_unused_parameters else "find_unused_parameters is already off"


RECIPE = Recipe(
    name="ddp_unused",
    summary="turn off find_unused_parameters where every parameter gets a gradient: no graph walk per step",
    targets=("network", "overhead"),
    risk="exact",
    keys=("ddp.find_unused_parameters",),
    why_not=why_not,
    space=lambda context: {"ddp.find_unused_parameters": Choice((True, False))},
    snippet=lambda plan: "model = DistributedDataParallel(model, find_unused_parameters=False)",
    textbook=lambda context: {"ddp.find_unused_parameters": False},
    kinds=("distributed",),
    hooks={"ddp": keyword_option("ddp.find_unused_parameters", "find_unused_parameters")},
)
