"""Dask dataframe: the source split into partitions, each read and transformed in parallel by
Dask workers (processes, so a row-wise Python transform runs on every core), on a LocalCluster
or on the cluster whose scheduler address the config names; then the parts are combined."""

from __future__ import annotations

from typing import Optional

from recipes.base import Choice, Context, Recipe
from recipes.chunked import why_not as needs_partition_safety


def why_not(context: Context) -> Optional[str]:
    if not context.dask_scheduler and context.cores < 2:
        return "one core: Dask workers on this machine would take turns"
    return needs_partition_safety(context)


def space(context: Context) -> dict:
    workers = (1,) if context.dask_scheduler else tuple(range(2, max(2, context.cores) + 1))
    params = {"pipeline.dask_workers": Choice((None, *workers)),
              "pipeline.dask_partitions": Choice((None, 2 * context.cores, 8 * context.cores))}
    if not context.dask_scheduler:  # on one machine, Dask's process pool skips a cluster's start-up
        params["pipeline.dask_scheduler"] = Choice((None, "distributed", "processes"))
    return params


# Dask's default reads text as Arrow strings with NA semantics (a filter `note != "x"` then drops
# the missing notes pandas keeps): read as pandas does, or the results change.
SAME_AS_PANDAS = 'dask.config.set({"dataframe.convert-string": False})  # pandas\' dtypes and missing-text semantics'

READERS = {"parquet": "read_parquet(path).repartition(npartitions=partitions",
           "jsonl": "read_json(path, lines=True, blocksize=size // partitions"}


def snippet(plan: dict) -> str:
    if plan.get("pipeline.dask_scheduler") == "processes":
        return ("import dask, dask.dataframe as dd\n"
                f"{SAME_AS_PANDAS}\n"
                f"parts = dd.{READERS.get(plan.get('pipeline.format'), 'read_csv(path, blocksize=size // partitions')})"
                f".to_delayed()  # partitions = {plan.get('pipeline.dask_partitions') or 'two per worker'}\n"
                "with dask.config.set({'multiprocessing.context': 'fork'}):\n"
                "    results = dask.compute(*[dask.delayed(transform)(part) for part in parts], "
                f"scheduler='processes', num_workers={plan['pipeline.dask_workers']})\n"
                "result = combine(list(results))")
    return ("import dask, dask.dataframe as dd\n"
            "from dask import compute, delayed\n"
            "from distributed import Client, LocalCluster\n"
            f"{SAME_AS_PANDAS}\n"
            f"client = Client(LocalCluster(n_workers={plan['pipeline.dask_workers']}, threads_per_worker=1))"
            "  # or Client('tcp://scheduler:8786')\n"
            f"parts = dd.{READERS.get(plan.get('pipeline.format'), 'read_csv(path, blocksize=size // partitions')})"
            f".to_delayed()  # partitions = {plan.get('pipeline.dask_partitions') or 'two per worker'}\n"
            "result = combine(list(compute(*[delayed(transform)(part) for part in parts])))")


def idle(plan: dict) -> frozenset:
    """Partitions and a scheduler need Dask; Dask reads in its own blocks, so chunks do nothing."""
    if not plan.get("pipeline.dask_workers"):
        return frozenset({"pipeline.dask_partitions", "pipeline.dask_scheduler"})
    return frozenset({"pipeline.chunksize"} if plan.get("pipeline.chunksize") else ())


RECIPE = Recipe(
    name="dask",
    summary="run the transform on Dask workers, partition by partition",
    targets=("python", "memory", "parse"),
    risk="tolerance",  # partial results combine in another order
    keys=("pipeline.dask_workers", "pipeline.dask_scheduler", "pipeline.dask_partitions"),
    why_not=why_not,
    space=space,
    snippet=snippet,
    textbook=lambda context: {"pipeline.dask_workers": 1 if context.dask_scheduler else context.cores,
                              "pipeline.dask_partitions": 2 * context.cores},
    kinds=("pipeline",),
    idle=idle,
)
