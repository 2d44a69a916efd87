"""The train kind's numerics: the seeded loss trajectory (and, for exact recipes, the parameters) against the baseline's."""

from __future__ import annotations

import math
from typing import Optional, Sequence

from advisor.measure import Measurement
from advisor.verify import EXACT_RTOL, Envelope, NumericsResult, first_non_finite


def compare_training(candidate: Measurement, baseline: Measurement, risk: str, loss_rtol: float,
                     envelope: Optional[Envelope] = None) -> NumericsResult:
    """The loss trajectories; for an exact recipe also the parameters after the same number of
    steps (a fix can keep the losses of a few steps and still update the weights differently).
    With the job's `envelope`, a job that amplifies rounding has each step's tolerance widened
    by how far rounding alone has grown by then."""
    losses = compare_losses(candidate.losses, baseline.losses, risk, loss_rtol, envelope)
    if risk != "exact" or not losses.passed:
        return losses
    mine, theirs = candidate.parameters, baseline.parameters
    if not mine or len(mine) != len(theirs):
        return NumericsResult(False, risk, math.inf, EXACT_RTOL, losses.steps,
                              f"parameters: {len(mine)} checksummed tensors against the baseline's {len(theirs)}")
    worst = max(abs(a - b) / max(abs(b), 1e-12) for m, t in zip(mine, theirs) for a, b in zip(m, t))
    rtol = envelope.parameter_tolerance(EXACT_RTOL) if envelope else EXACT_RTOL
    if worst > rtol:
        return NumericsResult(False, risk, worst, rtol, losses.steps,
                              f"parameters differ by {worst:.2%} after the same steps, over the {rtol:.2%} tolerance")
    return NumericsResult(True, risk, max(worst, losses.max_rel_diff), rtol, losses.steps,
                          "losses and parameters match" + (" within the job's rounding envelope" if rtol > EXACT_RTOL else ""))


def compare_losses(candidate: Sequence[float], baseline: Sequence[float], risk: str, loss_rtol: float,
                   envelope: Optional[Envelope] = None) -> NumericsResult:
    """Compares seeded loss trajectories step by step (same seeds, same batches, same order),
    each step within its tolerance: the risk's, widened where the job's envelope is wider."""
    if risk == "changes semantics":
        return NumericsResult(True, risk, 0.0, 0.0, 0, "changes what is computed: not compared, never verified")
    steps = min(len(candidate), len(baseline))
    floor = EXACT_RTOL if risk == "exact" else loss_rtol
    if steps == 0:
        return NumericsResult(False, risk, math.inf, floor, 0, "no losses to compare")
    lost = first_non_finite(candidate[:steps])
    if lost is not None and first_non_finite(baseline[:steps]) is None:
        return NumericsResult(False, risk, math.inf, floor, steps,
                              f"turns finite losses into {candidate[lost]} at step {lost + 1} (the baseline's is {baseline[lost]:.4g})")
    tolerances = [envelope.loss_tolerance(step, floor) if envelope else floor for step in range(steps)]
    diffs = [abs(c - b) / max(abs(b), 1e-12) for c, b in zip(candidate[:steps], baseline[:steps])]
    if not all(math.isfinite(d) for d in diffs):
        return NumericsResult(False, risk, math.inf, floor, steps, "loss differs without bound")
    worst_step = max(range(steps), key=lambda step: diffs[step] / tolerances[step] if tolerances[step] else math.inf)
    worst, rtol = diffs[worst_step], tolerances[worst_step]
    passed = worst <= rtol
    if passed:
        return NumericsResult(True, risk, max(diffs), max(tolerances), steps)
    over = f"the {rtol:.2%} tolerance" + (" (the job's rounding envelope there)" if rtol > floor else "")
    return NumericsResult(False, risk, worst, rtol, steps,
                          f"loss differs by {worst:.2%} at step {worst_step + 1}, over {over}")
