"""Dask dataframe: the source split into partitions, each read and transformed in parallel by
Dask workers (processes, so a row-wise Python transform runs on every core), on a LocalCluster
or on the cluster whose scheduler address the config names; then the parts are combined."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Optional

from advisor.recipes.base import Choice, Context, Recipe
from advisor.recipes.chunked import why_not as needs_partition_safety


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
PANDAS_SEMANTICS = {"dataframe.convert-string": False}
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


def execute(run) -> tuple:
    """Dask: on the cluster the config names, on a LocalCluster, or (`dask_scheduler: processes`)
    on Dask's local process pool, which skips a cluster's start-up and bookkeeping. Returns the
    combined output and the rows read."""
    import cloudpickle
    import dask

    code, plan = run.code, run.plan
    for module in {sys.modules[fn.__module__] for fn in (code.transform, code.combine) if fn is not None}:
        cloudpickle.register_pickle_by_value(module)  # workers need not see the user's files
    workers = int(plan["pipeline.dask_workers"])
    address = run.config.workload.dask.scheduler
    with dask.config.set(PANDAS_SEMANTICS):
        if address or (plan.get("pipeline.dask_scheduler") or "distributed") == "distributed":
            with _client(address, workers, run.stages) as client:
                workers = len(client.scheduler_info()["workers"])
                return _compute(run, workers, {})
        with dask.config.set({"multiprocessing.context": "fork"}):  # workers start as copies of this process
            return _compute(run, workers, {"scheduler": "processes", "num_workers": workers})


@contextmanager
def _client(address: Optional[str], workers: int, stages):
    import dask
    from distributed import Client, LocalCluster

    # The workers' own sampling profiler slows a Python-heavy task by a tenth or more: advisor's
    # measurement must not pay a cost the user's job would not.
    dask.config.set({"distributed.worker.profile.enabled": False})
    with stages.stage("cluster start"):
        cluster = None if address else LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40,
        )
        client = Client(address or cluster, timeout="60s")
        if cluster is not None:
            client.wait_for_workers(workers, timeout=60)  # tasks must not all land on the first
    try:
        yield client
    finally:
        with stages.stage("cluster stop"):
            client.close()
            if cluster is not None:
                cluster.close()


def _compute(run, workers: int, compute_options: dict) -> tuple:
    import dask
    import dask.dataframe as dd

    fmt, files = run.fmt, run.files
    partitions = int(run.plan.get("pipeline.dask_partitions") or 2 * workers)
    size = sum(path.stat().st_size for path in files)
    paths = [str(p) for p in files]
    options = {k: v for k, v in run.options.items() if k != "engine" or fmt != "jsonl"}
    with run.stages.stage("read+transform (Dask)"):
        if fmt == "parquet":
            ddf = dd.read_parquet(paths, **options).repartition(npartitions=partitions)
        elif fmt == "jsonl":
            ddf = dd.read_json(paths, blocksize=max(1, size // partitions), **options)
        else:
            ddf = dd.read_csv(paths, blocksize=max(1, size // partitions), **options)
        pieces = ddf.to_delayed()
        transform = dask.delayed(run.part_transform())
        parts, lengths = dask.compute([transform(p) for p in pieces], [dask.delayed(len)(p) for p in pieces],
                                      **compute_options)
    return run.finish(list(parts)), int(sum(lengths))


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
    hooks={"execute": lambda executor, plan: execute if plan.get("pipeline.dask_workers") else executor},
)
