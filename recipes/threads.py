"""Intra-op threads of the training process, balanced against DataLoader workers.

When workers prepare data on the same cores, fewer compute threads can leave room for them;
when nothing else runs, more threads can speed large operators.
"""

from __future__ import annotations

from typing import Optional

import torch

from recipes.base import Context, IntRange, Recipe


def why_not(context: Context) -> Optional[str]:
    return "one core: there is nothing to balance" if context.cores < 2 else None


def space(context: Context) -> dict:
    return {"threads.intra_op": IntRange(1, context.cores)}


def snippet(plan: dict) -> str:
    return f"torch.set_num_threads({plan['threads.intra_op']})  # once, at start-up"


def apply_threads(count: Optional[int]) -> None:
    """Sets the intra-op thread count of this process (None keeps torch's default)."""
    if count:
        torch.set_num_threads(int(count))


RECIPE = Recipe(
    name="threads",
    summary="set the intra-op thread count, balanced against DataLoader workers",
    targets=("compute", "input-prep", "tail"),
    # The same arithmetic split another way: sums in another order differ at rounding level, and
    # adaptive optimizers (Adam) carry that into weights whose gradients are near zero (measured:
    # 0.23% in a checksum after 16 AdamW steps). Judged on the loss, within loss_rtol.
    risk="tolerance",
    keys=("threads.intra_op",),
    why_not=why_not,
    space=space,
    snippet=snippet,
    kinds=("train", "infer"),
    textbook=lambda context: {"threads.intra_op": context.cores},
)
