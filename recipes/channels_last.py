"""channels_last: 4-D activations stored NHWC, the layout convolution kernels run fastest on
(oneDNN on the CPU, tensor cores on CUDA). The same numbers, in another memory order."""

from __future__ import annotations

from typing import Any, Optional

from advisor.recipes.base import Choice, Context, Recipe, serves


def why_not(context: Context) -> Optional[str]:
    if not context.conv_layers:
        return "the model has no Conv2d layer: the layout changes nothing"
    if context.kind != "infer" and context.device != "cuda":
        return "for training it is tried on CUDA, whose tensor-core convolutions want NHWC; on the CPU, for services"
    return None


def convert(model: Any, enabled: Optional[bool]) -> Any:
    if not enabled:
        return model
    import torch

    return model.to(memory_format=torch.channels_last)


def inputs(request: Any) -> Any:
    """4-D input tensors in the channels_last layout."""
    import torch

    from advisor.harness.batches import map_tensors

    return map_tensors(request, lambda t: t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t)


def snippet(plan: dict) -> str:
    if serves(plan):
        return ("model = model.to(memory_format=torch.channels_last)\n"
                "output = model(images.contiguous(memory_format=torch.channels_last))")
    return ("model = model.to(memory_format=torch.channels_last)  # before the optimizer is made\n"
            "# each batch, once on the device:\n"
            "images = images.contiguous(memory_format=torch.channels_last)")


RECIPE = Recipe(
    name="channels_last",
    summary="NHWC memory layout for convolutional models",
    targets=("compute",),
    risk="tolerance",  # other kernels, other summation order
    keys=("channels_last.enabled",),
    why_not=why_not,
    space=lambda context: {"channels_last.enabled": Choice((False, True))},
    snippet=snippet,
    textbook=lambda context: {"channels_last.enabled": True},
    kinds=("train", "distributed", "infer"),
    hooks={"model": lambda model, plan: convert(model, plan.get("channels_last.enabled")),
           "request": lambda request, plan: inputs(request) if plan.get("channels_last.enabled") else request,
           "batch": lambda batch, plan: inputs(batch) if plan.get("channels_last.enabled") else batch},
    off={"channels_last.enabled": False},
)
