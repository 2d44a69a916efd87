"""DistributedDataParallel's gradient buckets: their size.

DDP all-reduces gradients in buckets while backward still runs, overlapping communication with
compute. Small buckets start sending sooner but pay a message's fixed cost more often; large
ones send fewer, larger messages, which a slow or high-latency link prefers. The sum each rank
receives is the same whatever the grouping: exact.
"""

from __future__ import annotations

from advisor.recipes.base import Choice, Recipe, keyword_option

SIZES_MB = (1.0, 5.0, 25.0, 100.0)


def snippet(plan: dict) -> str:
    return f"model = DistributedDataParallel(model, bucket_cap_mb={plan['ddp.bucket_cap_mb']:g})"


RECIPE = Recipe(
    name="ddp_buckets",
    summary="size DistributedDataParallel's gradient buckets: fewer, larger messages on a slow link",
    targets=("network",),
    risk="exact",
    keys=("ddp.bucket_cap_mb",),
    why_not=lambda context: None,
    space=lambda context: {"ddp.bucket_cap_mb": Choice(tuple(sorted({*SIZES_MB, context.bucket_cap_mb})))},
    snippet=snippet,
    textbook=lambda context: {"ddp.bucket_cap_mb": 100.0},
    kinds=("distributed",),
    hooks={"ddp": keyword_option("ddp.bucket_cap_mb", "bucket_cap_mb")},
)
