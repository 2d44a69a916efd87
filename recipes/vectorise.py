"""Row-wise code rewritten over whole columns (`advisor.vectorise`), run as a candidate plan.

The profile run finds every user function that pandas calls once per row (`apply(f, axis=1)`,
`Series.apply`, `Series.map`), rewrites it on its source and computes both forms on a sample:
only rewrites whose values equal the row-wise code's become this recipe's plan, and the whole
run's output is then compared with the baseline's like any other candidate's. The plan's value
names the functions (`file.py:line`, comma-joined); the user's files are never modified.
"""

from __future__ import annotations

from typing import Optional

from advisor.recipes.base import Choice, Context, Recipe


def why_not(context: Context) -> Optional[str]:
    if context.rewrites:
        return None
    if context.rewrite_problems:
        return "no row function could be rewritten with its values unchanged: " + "; ".join(context.rewrite_problems)
    return "no row-wise Python function in the transform"


def targets(context: Context) -> str:
    return ",".join(where for where, _ in context.rewrites)


def snippet(plan: dict) -> str:
    return (f"# the row functions at {plan['pipeline.vectorise']}, rewritten over whole columns:\n"
            "# frame.apply(f, axis=1) -> f_columns(frame); series.apply(f) or .map(f) -> f_columns(series)")


def snippet_in(plan: dict, context: Context) -> Optional[str]:
    chosen = set(plan["pipeline.vectorise"].split(","))
    texts = [text for where, text in context.rewrites if where in chosen]
    if not texts:
        return None
    calls = "# then call them instead of the row-wise ones: frame.apply(f, axis=1) -> f_columns(frame);\n" \
            "# series.apply(f) or series.map(f) -> f_columns(series)"
    return "import numpy as np\n\n" + "\n".join(texts) + "\n" + calls


def prepare(run, plan: dict):
    """The run's transform with the named row functions swapped for their column forms."""
    if plan.get("pipeline.vectorise"):
        from dataclasses import replace

        from advisor.harness.vectorised import with_vectorised

        run.code = replace(run.code, transform=with_vectorised(run.code.transform, plan["pipeline.vectorise"]))
    return run


RECIPE = Recipe(
    name="vectorise",
    summary="rewrite row-wise functions over whole columns",
    targets=("python",),
    risk="exact",
    keys=("pipeline.vectorise",),
    why_not=why_not,
    space=lambda context: {"pipeline.vectorise": Choice((None, targets(context)))},
    snippet=snippet,
    textbook=lambda context: {"pipeline.vectorise": targets(context)},
    kinds=("pipeline",),
    snippet_in=snippet_in,
    unmasks=("parse", "io"),  # with the row-wise code gone, reading the source is most of the run
    hooks={"prepare": prepare},
)
