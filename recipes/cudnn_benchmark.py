"""cuDNN autotuning: each convolution shape is timed once over cuDNN's algorithms, the fastest kept.

For a convolutional model whose input shapes stay fixed, the search runs in the first steps
and every later step runs the fastest kernel. Shapes that change each step search again each
time, which is why PyTorch leaves it off. The first steps' search is a one-off cost, reported
with the steps after which it pays back. Another algorithm sums in another order: tolerance.
"""

from __future__ import annotations

from typing import Optional

from advisor.recipes.base import Choice, Context, Recipe
from advisor.recipes.compile import warmup_cost


def why_not(context: Context) -> Optional[str]:
    if context.device != "cuda":
        return "cuDNN autotuning picks among CUDA convolution kernels; there is no GPU here"
    if not context.conv_layers:
        return "the model has no convolution: cuDNN has nothing to tune"
    return None


def enable(value: None, plan: dict) -> None:
    if not plan.get("cudnn_benchmark.enabled"):
        return
    import torch  # here, not at the top: a pipeline's process never imports torch

    torch.backends.cudnn.benchmark = True


def snippet(plan: dict) -> str:
    return ("# once, before the training loop (input shapes must stay the same from step to step):\n"
            "torch.backends.cudnn.benchmark = True")


RECIPE = Recipe(
    name="cudnn_benchmark",
    summary="cuDNN autotuning: the fastest convolution kernel for each fixed input shape",
    targets=("compute",),
    risk="tolerance",
    keys=("cudnn_benchmark.enabled",),
    why_not=why_not,
    space=lambda context: {"cudnn_benchmark.enabled": Choice((False, True))},
    snippet=snippet,
    textbook=lambda context: {"cudnn_benchmark.enabled": True},
    kinds=("train", "distributed", "infer", "script"),
    one_off_cost=warmup_cost("cuDNN's autotuning"),
    prunable=False,  # its search lands in the first steps, so a running rate midway says little
    hooks={"process": enable},
    off={"cudnn_benchmark.enabled": False},
)
