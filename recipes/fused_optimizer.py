"""Fused optimizer steps: one kernel updates every parameter (Adam, AdamW, SGD with `fused=True`).

An optimizer step otherwise runs a few kernels per parameter tensor, or per group of them with
torch's default `foreach` path: on a GPU, a model of many small tensors spends its optimizer step
launching kernels. The fused kernel does the same arithmetic in another order: tolerance.
"""

from __future__ import annotations

from typing import Any, Optional

from advisor.recipes.base import Choice, Context, Recipe

FUSABLE = ("Adam", "AdamW", "SGD")  # torch.optim classes with a fused CUDA kernel


def why_not(context: Context) -> Optional[str]:
    if context.device != "cuda":
        return "fused optimizer steps are tried on CUDA, where the unfused step launches kernels per parameter group"
    if not context.optimizer:
        return "the job builds its own optimizer (a builder, or configure_optimizers): set fused=True there"
    if context.optimizer not in FUSABLE:
        return f"{context.optimizer} has no fused kernel in torch (only {', '.join(FUSABLE)})"
    return None


def fused(optimizer: Any, plan: dict) -> Any:
    """The optimizer made again with `fused=True`, before its first step: the same class, the
    same parameter groups and settings, no state yet to carry over."""
    if not plan.get("fused_optimizer.enabled"):
        return optimizer
    if any(optimizer.state.values()):
        raise RuntimeError("fused_optimizer: the optimizer has taken a step already; it is made fused before the first")
    groups = [{**group, "fused": True, "foreach": None} for group in optimizer.param_groups]
    return type(optimizer)(groups, fused=True)


def snippet(plan: dict) -> str:
    return "optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)  # Adam, AdamW or SGD: one kernel a step"


RECIPE = Recipe(
    name="fused_optimizer",
    summary="a fused optimizer step (Adam, AdamW, SGD with fused=True): one kernel for every parameter",
    targets=("overhead", "compute"),
    risk="tolerance",
    keys=("fused_optimizer.enabled",),
    why_not=why_not,
    space=lambda context: {"fused_optimizer.enabled": Choice((False, True))},
    snippet=snippet,
    textbook=lambda context: {"fused_optimizer.enabled": True},
    kinds=("train", "distributed"),
    hooks={"optimizer": fused},
    off={"fused_optimizer.enabled": False},
)
