"""Activation checkpointing: recompute a share of the model's blocks in the backward pass.

Wrapped blocks keep only their inputs; their activations are recomputed when the gradient
needs them, trading compute for memory. Uses `use_reentrant=False`, which preserves the RNG
state, so the recomputation matches the first pass.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Optional

from advisor.recipes.base import Choice, Context, Recipe

SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)


def why_not(context: Context) -> Optional[str]:
    if context.kind == "script":
        return "needs checkpoint(...) calls in the model's forward, inside the script's code; advisor changes a script only from outside"
    return None if context.blocks >= 2 else "the model has no nn.Sequential or nn.ModuleList of blocks to wrap"


def space(context: Context) -> dict:
    return {"checkpointing.share": Choice(SHARES)}


def snippet(plan: dict) -> str:
    share = plan["checkpointing.share"]
    return (
        "from torch.utils.checkpoint import checkpoint\n"
        f"# recompute the first {share:.0%} of the blocks in backward, segment by segment:\n"
        "x = checkpoint(segment, x, use_reentrant=False)  # instead of x = segment(x)"
    )


def block_container(model: Any) -> Optional[Any]:
    """The largest nn.Sequential or nn.ModuleList in the model: its blocks are what we wrap."""
    from torch import nn  # here, not at the top: a pipeline's process never imports torch

    containers = [m for m in model.modules() if isinstance(m, (nn.Sequential, nn.ModuleList)) and len(m) >= 2]
    return max(containers, key=len, default=None)


def count_blocks(model: Any) -> int:
    container = block_container(model)
    return len(container) if container is not None else 0


@functools.cache
def checkpointed_class() -> type:
    """The module that runs a wrapped module's forward under torch.utils.checkpoint (made on
    first use: a pipeline's process never imports torch)."""
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(nn.Module):
        def __init__(self, inner: nn.Module):
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return checkpoint(self.inner, *args, use_reentrant=False)

    return Checkpointed


def wrap(model: Any, share: float) -> Any:
    """Checkpoints the first `share` of the model's blocks; returns the (same) model.

    Consecutive children of an nn.Sequential are grouped into segments of about sqrt(n), the
    classic memory/recompute balance; each block of an nn.ModuleList is wrapped on its own,
    since the model's forward calls them one by one.
    """
    container = block_container(model) if share else None
    if container is None:
        return model
    from torch import nn

    Checkpointed = checkpointed_class()
    count = round(share * len(container))
    if isinstance(container, nn.ModuleList):
        for index in range(count):
            container[index] = Checkpointed(container[index])
        return model
    children = list(container)
    segment = max(1, round(math.sqrt(len(children))))
    wrapped = [
        Checkpointed(nn.Sequential(*children[start : min(start + segment, count)]))
        for start in range(0, count, segment)
    ]
    for name in list(container._modules):
        del container._modules[name]
    for index, module in enumerate(wrapped + children[count:]):
        container.add_module(str(index), module)
    return model


def apply(model: Any, plan: dict) -> Any:
    return wrap(model, plan.get("checkpointing.share") or 0.0)


RECIPE = Recipe(
    name="checkpointing",
    summary="recompute activations of a share of the blocks instead of storing them",
    targets=("memory",),
    risk="exact",
    kinds=("train", "distributed", "script"),
    keys=("checkpointing.share",),
    why_not=why_not,
    space=space,
    snippet=snippet,
    textbook=lambda context: {"checkpointing.share": 1.0},
    hooks={"model": apply},
    off={"checkpointing.share": 0.0},
)
