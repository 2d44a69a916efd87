"""Threads inside each loading process: a batch's samples fetched at once.

A sample that waits on storage or the network holds no CPU while it waits, and worker processes
are a costly way to wait: each is a copy of the process, and on a few cores their number soon
passes what the machine can schedule. A pool of threads in each loading process (the main
process when there are no workers) fetches a batch's samples concurrently through the dataset's
`__getitems__`, which the DataLoader calls where it exists: the same samples, in the same order.
Python's GIL runs one thread's Python at a time, so threads pay where a sample waits and
processes where it computes; the diagnosis says which (`advisor.loading`). An IterableDataset,
whose samples come one after another, gets a bounded read-ahead instead.
"""

from __future__ import annotations

from typing import Any, Optional

from advisor.recipes.base import Choice, Context, Recipe, at_call

KEY = "dataloader.fetch_threads"
THREADS = (1, 2, 4, 8, 16, 32, 64)  # 1: no pool, the DataLoader's own loop
PREP_BOUND_WHY = ("samples cost CPU time to prepare, not waiting: Python's GIL would run the threads' work one "
                  "at a time; worker processes (dataloader) fit")


def why_not(context: Context) -> Optional[str]:
    if context.kind == "script" and not context.loader_call:
        return "the script builds no torch DataLoader: its batches come from its own code"
    if "input-prep" in context.bottlenecks and "input-fetch" not in context.bottlenecks:
        return PREP_BOUND_WHY
    return None


def space(context: Context) -> dict:
    return {KEY: Choice(THREADS)}


def textbook(context: Context) -> dict:
    return {KEY: 16}


def fetched_by_threads(dataset: Any, plan: dict) -> Any:
    """The dataset as the loader should see it under the plan (`advisor.harness.fetching`)."""
    threads = int(plan.get(KEY) or 1)
    if threads <= 1:
        return dataset
    from advisor.harness.fetching import threaded  # here: a pipeline's process never imports torch

    return threaded(dataset, threads)


WRAPPER = '''import os
from concurrent.futures import ThreadPoolExecutor


class ThreadedFetch(torch.utils.data.Dataset):
    """Fetches each batch's samples with `threads` threads in every loading process: the same
    samples in the same order (the DataLoader calls __getitems__ where a dataset has it)."""

    def __init__(self, dataset, threads):
        self.dataset, self.threads, self.pool, self.pid = dataset, threads, None, None

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        return self.dataset[index]

    def __getitems__(self, indices):
        if self.pid != os.getpid():  # one pool per loading process
            self.pool, self.pid = ThreadPoolExecutor(self.threads), os.getpid()
        return list(self.pool.map(self.dataset.__getitem__, indices))
'''


def snippet(plan: dict) -> str:
    threads = plan[KEY]
    return (f"{WRAPPER}\n\nloader = DataLoader(ThreadedFetch(dataset, threads={threads}), batch_size=..., num_workers=...)\n"
            f"# torchdata.nodes: ParallelMapper(source, map_fn=dataset.__getitem__, num_workers={threads}, method='thread')")


def snippet_in(plan: dict, context: Context) -> Optional[str]:
    """At a script's own DataLoader call: wrap its dataset."""
    if not context.loader_call:
        return None
    return at_call(context.loader_call, f"{WRAPPER}\n# wrap the dataset that DataLoader(...) call reads:\n"
                                        f"DataLoader(ThreadedFetch(dataset, threads={plan[KEY]}), ...)")


def idle(plan: dict) -> frozenset:
    return frozenset()


RECIPE = Recipe(
    name="fetch_threads",
    summary="fetch each batch's samples with threads inside every loading process",
    targets=("input-fetch", "input-prep"),
    risk="exact",
    kinds=("train", "distributed", "script"),
    keys=(KEY,),
    why_not=why_not,
    space=space,
    snippet=snippet,
    snippet_in=snippet_in,
    textbook=textbook,
    off={KEY: 1},
    hooks={"dataset": lambda dataset, plan: fetched_by_threads(dataset, plan)},
)
