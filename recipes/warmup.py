"""Warm-up at load time: serve N requests before the first client's.

The first calls of a fresh model pay one-off costs (lazy initialisation, allocator growth,
kernel selection, compilation), and per-shape caches pay them again for each new shape, into
the tail. Served at load time, sample requests keep them out of any client's latency.
"""

from __future__ import annotations

from advisor.recipes.base import Choice, Recipe, always


def snippet(plan: dict) -> str:
    count = plan["warmup.requests"]
    return (f"for request in sample_requests[:{count}]:  # at load time, before the service takes traffic\n"
            "    model(request)")


RECIPE = Recipe(
    name="warmup",
    summary="serve a few requests at load time, so the first client does not pay the cold start",
    targets=("cold-start", "tail"),
    risk="exact",
    keys=("warmup.requests",),
    why_not=always,
    space=lambda context: {"warmup.requests": Choice((0, 8, 32, 128))},
    snippet=snippet,
    textbook=lambda context: {"warmup.requests": 32},
    kinds=("infer",),
    hooks={"warm_requests": lambda count, plan: int(plan.get("warmup.requests") or count)},
    off={"warmup.requests": 0},
)
