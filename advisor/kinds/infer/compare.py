"""The infer kind's numerics: each plan's outputs on the same requests against the baseline's."""

from __future__ import annotations

import math
from typing import Optional

from advisor.measure import Measurement
from advisor.verify import EXACT_RTOL, NumericsResult


def nondeterministic_service(reference: Measurement, risk: str, tolerance: float) -> Optional[NumericsResult]:
    """A failed comparison when the baseline itself answered the same requests differently on
    a second pass (dropout left on, sampling): no plan's outputs can then be told from the
    service's own variation, so none is verified on them. None for a service that repeats."""
    if risk == "changes semantics":
        return None
    repeat = reference.output.get("repeat_difference")
    if repeat is None or repeat <= min(tolerance, EXACT_RTOL):
        return None
    return NumericsResult(False, risk, math.inf, tolerance, 0, nondeterministic_reason(repeat))


def nondeterministic_reason(repeat: float) -> str:
    return (f"the service is nondeterministic: the baseline answers the same requests {repeat:.2%} differently "
            "from one pass to the next, so no plan's outputs can be checked and none is verified; "
            "put the model in eval mode (dropout) or seed its sampling")


def compare_served(candidate: Optional[str], reference: Optional[str], risk: str, rtol: float,
                   min_top1: float) -> NumericsResult:
    """Two plans' outputs on the same requests: every tensor within `rtol` of the reference's
    largest magnitude (exact recipes: to 0.1%), and for classifier-shaped outputs (rows of
    scores) the top-1 class agreeing on at least `min_top1` of the rows."""
    import torch

    if risk == "changes semantics":
        return NumericsResult(True, risk, 0.0, 0.0, 0, "changes what is computed: not compared, never verified")
    tolerance = EXACT_RTOL if risk == "exact" else rtol
    if not candidate or not reference:
        return NumericsResult(False, risk, math.inf, tolerance, 0, "no outputs kept to compare")
    # tensors in lists and tuples: nothing in the files can run code as it loads
    mine, theirs = torch.load(candidate, weights_only=True), torch.load(reference, weights_only=True)
    if len(mine) != len(theirs):
        return NumericsResult(False, risk, math.inf, tolerance, 0, f"{len(mine)} outputs against the baseline's {len(theirs)}")
    worst, agreeing, rows = 0.0, 0, 0
    for index, (outputs, expected) in enumerate(zip(mine, theirs)):
        for got, want in zip(outputs, expected):
            if got.shape != want.shape:
                return NumericsResult(False, risk, math.inf, tolerance, index,
                                      f"request {index}: output shape {list(got.shape)}, the baseline's {list(want.shape)}")
            lost = non_finite_where_finite(got, want)
            if lost:
                return NumericsResult(False, risk, math.inf, tolerance, index,
                                      f"request {index}: {lost} where the baseline's outputs are finite")
            worst = max(worst, float((got - want).abs().max() / want.abs().max().clamp_min(1e-12)))
        scores = expected[0] if expected else None
        if scores is not None and scores.dim() >= 1 and scores.shape[-1] > 1:
            flat_want, flat_got = scores.reshape(-1, scores.shape[-1]), outputs[0].reshape(-1, scores.shape[-1])
            agreeing += int((flat_want.argmax(-1) == flat_got.argmax(-1)).sum())
            rows += flat_want.shape[0]
    agreement = agreeing / rows if rows else 1.0
    if worst > tolerance:
        return NumericsResult(False, risk, worst, tolerance, len(theirs),
                              f"outputs differ by {worst:.2%} at worst, over the {tolerance:.2%} tolerance")
    if agreement < min_top1:
        return NumericsResult(False, risk, worst, tolerance, len(theirs),
                              f"top-1 agrees on {agreement:.1%} of rows, under {min_top1:.1%}")
    return NumericsResult(True, risk, worst, tolerance, len(theirs),
                          f"outputs match on {len(theirs)} requests" + (f", top-1 agreement {agreement:.1%}" if rows else ""))


def non_finite_where_finite(got, want) -> str:
    """The count of NaN or infinite outputs whose reference is finite, in words; "" for none.
    A NaN compares as no difference under max(), so it is looked for first: an answer of NaN is
    never "outputs match"."""
    if not (got.is_floating_point() or got.is_complex()):
        return ""
    bad = ~got.isfinite() & want.isfinite() if (want.is_floating_point() or want.is_complex()) else ~got.isfinite()
    count = int(bad.sum())
    return f"{count} of {got.numel()} outputs are NaN or infinite" if count else ""
