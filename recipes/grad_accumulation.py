"""Gradient accumulation: the same batch, run as micro-batches whose gradients add up.

Each micro-batch's loss is weighted by its share of the batch before backward, so the summed
gradient is the full batch's (for a mean-reduced loss) and one optimizer step follows, as
before: the same effective batch, exact up to the order of float sums. Stored activations
shrink with the micro-batch. Layers that compute batch statistics (BatchNorm) would see
smaller batches, so the recipe stays out where the model has them.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from recipes.base import Choice, Context, Recipe

MICRO_BATCHES = (1, 2, 4, 8)


def why_not(context: Context) -> Optional[str]:
    if context.batch_stat_layers:
        return (f"the model has {context.batch_stat_layers} BatchNorm layer(s), whose statistics would change "
                "with the micro-batch size")
    return None


def space(context: Context) -> dict:
    return {"grad_accumulation.micro_batches": Choice(MICRO_BATCHES)}


def snippet(plan: dict) -> str:
    micro = plan["grad_accumulation.micro_batches"]
    return (
        "optimizer.zero_grad(set_to_none=True)\n"
        f"for xs, ys in zip(x.tensor_split({micro}), y.tensor_split({micro})):  # {micro} micro-batches, one step\n"
        "    loss = loss_fn(model(xs), ys) * (len(xs) / len(x))\n"
        "    loss.backward()\n"
        "optimizer.step()"
    )


def split_batch(batch: Any, parts: int) -> list[Any]:
    """A (input, target, ...) batch as `parts` micro-batches, tensors split along dim 0 (the
    last ones one sample shorter when the batch does not divide); other items shared."""
    length = batch[0].shape[0]
    parts = max(1, min(parts, length))
    pieces = [item.tensor_split(parts) if isinstance(item, torch.Tensor) else None for item in batch]
    return [
        type(batch)(item if split is None else split[index] for item, split in zip(batch, pieces))
        for index in range(parts)
    ]


RECIPE = Recipe(
    name="grad_accumulation",
    summary="run each batch as micro-batches and accumulate their gradients: the same step, less memory",
    targets=("memory",),
    risk="exact",
    keys=("grad_accumulation.micro_batches",),
    why_not=why_not,
    space=space,
    snippet=snippet,
    textbook=lambda context: {"grad_accumulation.micro_batches": 4},
)
