"""DistributedDataParallel's `static_graph`: the model's graph and the parameters it uses are
the same every step, so DDP can record the bucket order once and skip per-step bookkeeping. The
gradients are the same: exact. A job whose used parameters change from step to step fails the
trial, which then counts as failed.
"""

from __future__ import annotations

from advisor.recipes.base import Choice, Recipe, keyword_option

RECIPE = Recipe(
    name="ddp_static_graph",
    summary="declare the training graph static to DistributedDataParallel: its bookkeeping done once",
    targets=("network",),
    risk="exact",
    keys=("ddp.static_graph",),
    why_not=lambda context: None,
    space=lambda context: {"ddp.static_graph": Choice((False, True))},
    snippet=lambda plan: "model = DistributedDataParallel(model, static_graph=True)",
    textbook=lambda context: {"ddp.static_graph": True},
    kinds=("distributed",),
    hooks={"ddp": keyword_option("ddp.static_graph", "static_graph", off=False)},
    off={"ddp.static_graph": False},
)
