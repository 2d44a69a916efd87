"""Operator fusion with torch.compile.

Fuses the many short operators of a step into fewer kernels, removing per-operator dispatch
cost. The first steps pay the compile time; the report gives it and the step count after
which it pays off.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from advisor.recipes.base import Choice, Context, Recipe, at_call


def why_not(context: Context) -> Optional[str]:
    if context.kind == "script" and not context.forward_call:  # compiled in place at its outermost module call
        return "the script called no model (an nn.Module) in its own files, so there is no module to compile"
    return None


def space(context: Context) -> dict:
    if context.device == "cuda":
        return {"compile.mode": Choice((None, "default", "reduce-overhead", "max-autotune"))}
    # On the CPU, reduce-overhead (CUDA graphs) adds nothing and max-autotune compiles for minutes.
    return {"compile.mode": Choice((None, "default"))}


def textbook(context: Context) -> dict:
    """Fusion; on a GPU that idles between kernel launches, CUDA graphs too (reduce-overhead):
    the whole step replayed as one launch."""
    launch_bound = context.device == "cuda" and "overhead" in context.bottlenecks
    return {"compile.mode": "reduce-overhead" if launch_bound else "default"}


def snippet(plan: dict) -> str:
    return f"model = torch.compile(model, mode={plan['compile.mode']!r})  # first steps compile; later ones run fused"


def snippet_in(plan: dict, context: Context) -> Optional[str]:
    """At a script's own first call of its model: compiled in place, as advisor measured it (its
    state_dict keys stay as they are, where torch.compile's wrapper would prefix them)."""
    if not context.forward_call:
        return None
    return at_call(context.forward_call, "# compile the model called here in place, once, before the training loop:\n"
                                         f"model.compile(mode={plan['compile.mode']!r})")


def compile_model(model: Any, mode: Optional[str], in_place: bool = False) -> Any:
    """The model compiled; `in_place` compiles the module's own calls (a Lightning module's
    training_step calls self(...), which a wrapper would not reach)."""
    if not mode:
        return model
    if in_place:
        model.compile(mode=mode)
        return model
    import torch  # here, not at the top: a pipeline's process never imports torch

    return torch.compile(model, mode=mode)


def break_even_steps(compile_s: float, eager_step_s: float, compiled_step_s: float) -> Optional[float]:
    """Steps after which the compile time is paid back; None when the compiled step is no faster."""
    saved = eager_step_s - compiled_step_s
    return compile_s / saved if saved > 0 else None


def warmup_cost(what: str) -> Callable[[list, list, str], dict]:
    """A one-off cost paid in the warm-up (`what` it buys, in the report's words): the warm-up's
    time beyond as many steady steps (or requests, `per`), and the steps after which the faster
    step pays it back (`Recipe.one_off_cost`)."""

    def cost(runs: list, reference_runs: list, per: str = "step") -> dict:
        good = [r for r in runs if r.ok and r.warmup_ms]
        base = [r for r in reference_runs if r.ok]
        if not good or not base:
            return {}
        step_ms = sum(r.step_ms_mean for r in good) / len(good)
        base_ms = sum(r.step_ms_mean for r in base) / len(base)
        spent_s = sum(max(0.0, (sum(r.warmup_ms) - len(r.warmup_ms) * step_ms) / 1000) for r in good) / len(good)
        return {"what": what, "seconds": spent_s,
                "paid_back_after": break_even_steps(spent_s, base_ms / 1000, step_ms / 1000), "per": per}

    return cost


compile_cost = warmup_cost("compiling")  # compile time, and the steps (`per`) after which it pays off


RECIPE = Recipe(
    name="compile",
    summary="fuse operators with torch.compile",
    targets=("overhead", "compute"),
    risk="tolerance",
    keys=("compile.mode",),
    why_not=why_not,
    space=space,
    snippet=snippet,
    kinds=("train", "distributed", "infer", "script"),
    textbook=textbook,
    snippet_in=snippet_in,
    one_off_cost=compile_cost,
    # its cost lands unevenly in its first timed steps (recompiles, compile workers still busy), so
    # its running rate says little midway (`python -m experiments.pruning` pruned the overhead
    # job's winning compile plan)
    prunable=False,
    hooks={"compiled": lambda model, plan, in_place=False: compile_model(model, plan.get("compile.mode"), in_place)},
)
