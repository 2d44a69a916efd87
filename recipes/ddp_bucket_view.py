"""DistributedDataParallel's `gradient_as_bucket_view`: gradients that are views into the
communication buckets, so no copy in and out of them each step, and one copy of the gradients
held instead of two. The values are the same: exact.
"""

from __future__ import annotations

from advisor.recipes.base import Choice, Recipe, keyword_option

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
    hooks={"ddp": keyword_option("ddp.gradient_as_bucket_view", "gradient_as_bucket_view", off=False)},
    off={"ddp.gradient_as_bucket_view": False},
)
