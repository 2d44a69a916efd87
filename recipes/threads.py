"""Intra-op threads of the process, balanced against DataLoader workers; for a service, inter-op
threads too.

When workers prepare data on the same cores, fewer compute threads can leave room for them;
when nothing else runs, more threads can speed large operators. A service's concurrent
requests and forked sub-graphs share the inter-op pool, which torch sizes to the cores.
"""

from __future__ import annotations

from typing import Optional

from advisor.recipes.base import Context, IntRange, Recipe


def why_not(context: Context) -> Optional[str]:
    return "one core: there is nothing to balance" if context.cores < 2 else None


def space(context: Context) -> dict:
    space = {"threads.intra_op": IntRange(1, context.cores)}
    if context.kind == "infer":
        space["threads.inter_op"] = IntRange(1, context.cores)
    return space


def snippet(plan: dict) -> str:
    lines = [f"torch.set_num_threads({plan['threads.intra_op']})  # once, at start-up"] if plan.get("threads.intra_op") else []
    if plan.get("threads.inter_op"):
        lines.append(f"torch.set_num_interop_threads({plan['threads.inter_op']})  # before the first request")
    return "\n".join(lines)


def apply_threads(count: Optional[int], inter_op: Optional[int] = None) -> None:
    """Sets this process's intra-op (and inter-op) thread counts; None keeps torch's default.
    The inter-op count can be set only before torch's inter-op pool starts: in a fresh child."""
    import torch  # here, not at the top: a pipeline's process never imports torch

    if count:
        torch.set_num_threads(int(count))
    if inter_op:
        torch.set_num_interop_threads(int(inter_op))


def apply(value: None, plan: dict) -> None:
    apply_threads(plan.get("threads.intra_op"), plan.get("threads.inter_op"))


RECIPE = Recipe(
    name="threads",
    summary="set the intra-op (for a service, also inter-op) thread counts, balanced against DataLoader workers",
    targets=("compute", "input-prep", "tail"),
    # The same arithmetic split another way: sums in another order differ at rounding level, and
    # adaptive optimizers (Adam) carry that into weights whose gradients are near zero (measured:
    # 0.23% in a checksum after 16 AdamW steps). Judged on the loss, within loss_rtol.
    risk="tolerance",
    keys=("threads.intra_op", "threads.inter_op"),
    why_not=why_not,
    space=space,
    snippet=snippet,
    kinds=("train", "distributed", "infer", "script"),
    textbook=lambda context: {"threads.intra_op": context.cores},
    hooks={"process": apply},
)
