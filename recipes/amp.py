"""Automatic mixed precision: bfloat16 autocast on the CPU or CUDA, float16 with a GradScaler on CUDA.

Lower precision halves the bytes of activations and, on hardware with native support
(AVX512-BF16 or AMX on the CPU, tensor cores on the GPU), runs matrix multiplies faster.
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional

from advisor.recipes.base import Choice, Context, Recipe, at_call, serves


def why_not(context: Context) -> Optional[str]:
    if context.device == "cpu" and not context.cpu_bf16:
        return "this CPU has no native bfloat16 (avx512_bf16 or amx_bf16), so autocast would be emulated; float16 needs CUDA"
    return None


def space(context: Context) -> dict:
    # float16 needs a GradScaler's calls inside the step: not where the step is the user's own.
    own_step = context.step or context.kind == "script"
    options = (None, "bfloat16", "float16") if context.device == "cuda" and not own_step else (None, "bfloat16")
    return {"amp.dtype": Choice(options)}


def snippet(plan: dict) -> str:
    dtype = plan["amp.dtype"]
    if serves(plan):
        return (f"with torch.autocast(device.type, dtype=torch.{dtype}):\n"
                "    output = model(request)")
    if dtype == "float16":
        return (
            "scaler = torch.amp.GradScaler('cuda')\n"
            "with torch.autocast('cuda', dtype=torch.float16):\n"
            "    loss = loss_fn(model(x), y)\n"
            "scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()"
        )
    return (
        "with torch.autocast(device.type, dtype=torch.bfloat16):\n"
        "    loss = loss_fn(model(x), y)\n"
        "loss.backward(); optimizer.step()"
    )


def around_step(plan: dict, step: str) -> str:
    """Autocast wraps the call to the user's own step; its backward and optimizer step run inside."""
    return (
        f"with torch.autocast(device.type, dtype=torch.{plan['amp.dtype']}):\n"
        f"    loss = {step}(model, batch, optimizer)"
    )


def snippet_in(plan: dict, context: Context) -> Optional[str]:
    """Around the user's own step, or at a script's own forward call."""
    if context.step:
        return around_step(plan, context.step)
    if context.forward_call:
        indent = " " * 4
        return at_call(context.forward_call, f"# run it, and the loss computed from it, under autocast:\n"
                                             f"with torch.autocast(device.type, dtype=torch.{plan['amp.dtype']}):\n"
                                             f"{indent}{context.forward_call[1]}")
    return None


def autocast(device_type: str, dtype: Optional[str]) -> Any:
    """The autocast context for a plan's `amp.dtype` (a no-op context for None)."""
    if not dtype:
        return contextlib.nullcontext()
    import torch  # here, not at the top: a pipeline's process never imports torch

    return torch.autocast(device_type, dtype=getattr(torch, dtype))


def grad_scaler(device_type: str, dtype: Optional[str]) -> Optional[Any]:
    """float16 gradients underflow without loss scaling; bfloat16 keeps float32's range."""
    if dtype != "float16":
        return None
    import torch

    return torch.amp.GradScaler(device_type)


def limits(context: Context) -> dict:
    """float16 around a step the user wrote: its GradScaler calls would have to go inside that step."""
    if not (context.step or context.kind == "script") or context.device != "cuda":
        return {}
    inside = context.step or "the script"
    return {"amp (float16)": f"float16 needs a GradScaler's calls inside {inside} (scaler.scale(loss).backward(), "
                             "scaler.step(optimizer), scaler.update()); bfloat16, which needs none, is tried"}


RECIPE = Recipe(
    name="amp",
    summary="mixed precision: bfloat16 autocast (float16 with a GradScaler on CUDA)",
    targets=("compute", "memory"),
    risk="tolerance",
    keys=("amp.dtype",),
    why_not=why_not,
    space=space,
    snippet=snippet,
    kinds=("train", "distributed", "infer", "script"),
    textbook=lambda context: {"amp.dtype": "bfloat16"},
    snippet_in=snippet_in,
    limits=limits,
    hooks={
        "around_forward": lambda plan, device_type: autocast(device_type, plan.get("amp.dtype")),
        "around_serve": lambda plan, device_type: autocast(device_type, plan.get("amp.dtype")),
        "grad_scaler": lambda scaler, plan, device_type: grad_scaler(device_type, plan.get("amp.dtype")) or scaler,
    },
)
