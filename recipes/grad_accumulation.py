"""Gradient accumulation: the same batch, run as micro-batches whose gradients add up.

Each micro-batch's loss is weighted by its share of the batch before backward, so the summed
gradient is the full batch's (for a mean-reduced loss) and one optimizer step follows, as
before: the same effective batch, exact up to the order of float sums. Stored activations
shrink with the micro-batch. Layers that compute batch statistics (BatchNorm) would see
smaller batches, so the recipe stays out where the model has them.
"""

from __future__ import annotations

from typing import Optional

from advisor.recipes.base import Choice, Context, Recipe

MICRO_BATCHES = (1, 2, 4, 8)


def why_not(context: Context) -> Optional[str]:
    if context.step:
        return (f"the step is yours ({context.step}): micro-batches would have to be split inside it; "
                "accumulate there if memory is short")
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


RECIPE = Recipe(
    name="grad_accumulation",
    summary="run each batch as micro-batches and accumulate their gradients: the same step, less memory",
    targets=("memory",),
    risk="exact",
    kinds=("train", "distributed"),
    keys=("grad_accumulation.micro_batches",),
    why_not=why_not,
    space=space,
    snippet=snippet,
    textbook=lambda context: {"grad_accumulation.micro_batches": 4},
    hooks={"micro_batches": lambda parts, plan: plan.get("grad_accumulation.micro_batches") or parts},
    off={"grad_accumulation.micro_batches": 1},
)
