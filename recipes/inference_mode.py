"""Inference mode: serve without autograd.

A model called without `torch.inference_mode()` (or `no_grad`) records every operation for a
backward pass that never comes: time and memory for nothing. Outputs are the same numbers.
"""

from __future__ import annotations

from typing import Any, Optional

from advisor.recipes.base import Choice, Context, Recipe


def why_not(context: Context) -> Optional[str]:
    if not context.grad_enabled:
        return "the service already runs without autograd (its outputs carry no gradient history)"
    return None


def snippet(plan: dict) -> str:
    return ("with torch.inference_mode():  # no autograd bookkeeping for a backward that never comes\n"
            "    output = model(request)")


def grad_mode(enabled: Optional[bool]) -> Any:
    """Inference mode when the plan asks; else autograd on, as the user's service runs."""
    import torch  # here, not at the top: a pipeline's process never imports torch

    return torch.inference_mode() if enabled else torch.enable_grad()


RECIPE = Recipe(
    name="inference_mode",
    summary="serve under torch.inference_mode(): no autograd recording",
    targets=("compute", "overhead", "tail", "memory"),
    risk="exact",
    keys=("inference_mode.enabled",),
    why_not=why_not,
    space=lambda context: {"inference_mode.enabled": Choice((False, True))},
    snippet=snippet,
    textbook=lambda context: {"inference_mode.enabled": True},
    kinds=("infer",),
    hooks={"around_serve": lambda plan, device_type: grad_mode(plan.get("inference_mode.enabled"))},
    off={"inference_mode.enabled": False},
)
