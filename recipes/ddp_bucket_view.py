"""DistributedDataParallel's `gradient_as_bucket_view`: gradients that are views into the
communication buckets, so no copy in and out of them each step, and one copy of the gradients
held instead of two. The values are the same: exact.
"""

from __future__ import annotations

from recipes.base import Choice, Recipe


def apply(options: dict, plan: dict, **facts) -> dict:
    return {**options, "gradient_as_bucket_view": True} if plan.get("ddp.gradient_as_bucket_view") else options


RECIPE = Recipe(
    name="ddp_bucket_view",
    summary="let gradients live in DistributedDataParallel's buckets: no copies, less memory",
    targets=("network", "memory"),
    risk="exact",
    keys=("ddp.gradient_as_bucket_view",),
    why_not=lambda context: None,
    space=lambda context: {"ddp.gradient_as_bucket_view": Choice((False, True))},
    snippet=lambda plan: "model = DistributedDataParallel(model, gradient_as_bucket_view=True)",
    textbook=lambda context: {"ddp.gradient_as_bucket_view": True},
    kinds=("distributed",),
    hooks={"ddp": apply},
    off={"ddp.gradient_as_bucket_view": False},
)
