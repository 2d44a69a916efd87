"""Chunked processing: read and transform the source a block of rows at a time, keeping only
the partial results, then combine them. Needs a partition-safe transform (and a `combine`
where partial results must be merged, as for sums per group)."""

from __future__ import annotations

from typing import Optional

from advisor.recipes.base import Choice, Context, Recipe, reader

CHUNKS = (4, 16, 64)  # the source split into this many chunks


def why_not(context: Context) -> Optional[str]:
    if not context.partition_safe:
        return ("needs a partition-safe transform: set workload.partition_safe: true when the transform "
                "of a concatenation equals the combine of the transformed parts")
    return None


def space(context: Context) -> dict:
    sizes = sorted({max(1_000, context.rows // n) for n in CHUNKS}, reverse=True)
    return {"pipeline.chunksize": Choice((None, *sizes))}


def snippet(plan: dict) -> str:
    return (f"parts = [transform(chunk) for chunk in {reader(plan, 'chunksize=' + str(plan['pipeline.chunksize']))}]\n"
            "result = combine(parts)  # pd.concat(parts) where rows need no merging")


def idle(plan: dict) -> frozenset:
    """pyarrow's parser cannot stream: chunks read by pandas (not by Dask, which reads in its own
    blocks) leave it nothing to do."""
    if plan.get("pipeline.chunksize") and not plan.get("pipeline.dask_workers"):
        return frozenset({"pipeline.engine"})
    return frozenset()


def execute(run) -> tuple:
    """Reads and transforms the source a chunk at a time, keeping only the partial results;
    returns the combined output and the rows read."""
    parts, rows = [], 0
    for path in run.files:
        chunks = run.chunks(path, int(run.plan["pipeline.chunksize"]))
        while True:
            with run.stages.stage("read"):
                chunk = next(chunks, None)
                if chunk is None:
                    break
                chunk = run.after_read(chunk)
            rows += len(chunk)
            with run.stages.stage("transform"):
                parts.append(run.transform(chunk))
            del chunk  # only the partial results stay in memory
    return run.finish(parts), rows


RECIPE = Recipe(
    name="chunked",
    summary="process the source in chunks under the memory budget",
    targets=("memory",),
    risk="tolerance",  # partial float sums add up in another order
    keys=("pipeline.chunksize",),
    why_not=why_not,
    space=space,
    snippet=snippet,
    textbook=lambda context: {"pipeline.chunksize": max(1_000, context.rows // CHUNKS[1])},
    kinds=("pipeline",),
    idle=idle,
    hooks={"execute": lambda executor, plan: execute if plan.get("pipeline.chunksize") else executor},
)
