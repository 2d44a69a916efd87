"""The datasets a loader reads under `dataloader.fetch_threads` (recipes/fetch_threads.py): a
batch's samples fetched by a pool of threads in each loading process, or, for an iterable
dataset, read ahead by one thread. The same samples in the same order, either way."""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

from torch.utils.data import Dataset, IterableDataset


def threaded(dataset: Any, threads: int) -> Any:
    return ReadAhead(dataset, threads) if isinstance(dataset, IterableDataset) else ThreadedFetch(dataset, threads)


class ThreadedFetch(Dataset):
    """A map-style dataset whose batches are fetched by `threads` threads: the DataLoader calls
    `__getitems__` where a dataset has it. The pool is made in each loading process on first use
    (threads do not survive a fork: a worker makes its own), lives as long as that process
    (persistent workers keep it) and dies with it. A sample's error is raised as the dataset's
    own. Every other attribute is the dataset's."""

    def __init__(self, dataset: Any, threads: int) -> None:
        self.dataset, self.threads = dataset, threads
        self._pool, self._pid = None, -1

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list) -> list:
        if self._pid != os.getpid():
            self._pool, self._pid = ThreadPoolExecutor(self.threads, thread_name_prefix="fetch"), os.getpid()
        return list(self._pool.map(self.dataset.__getitem__, indices))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "threads", "_pool", "_pid"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __getstate__(self) -> dict:  # a spawned worker gets the dataset, and makes its own pool
        return {"dataset": self.dataset, "threads": self.threads, "_pool": None, "_pid": -1}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


class ReadAhead(IterableDataset):
    """An iterable dataset read up to `depth` samples ahead by one thread of each loading
    process: its waits overlap the step's work. Its sharding across workers is its own."""

    def __init__(self, dataset: Any, depth: int) -> None:
        self.dataset, self.depth = dataset, depth

    def __iter__(self) -> Iterator:
        ahead: queue.Queue = queue.Queue(self.depth)
        done = object()

        def read() -> None:
            try:
                for sample in self.dataset:
                    ahead.put((sample, None))
            except BaseException as exc:  # raised where the loader reads, as the dataset's own
                ahead.put((None, exc))
            ahead.put((done, None))

        threading.Thread(target=read, daemon=True, name="read-ahead").start()
        while True:
            sample, error = ahead.get()
            if error is not None:
                raise error
            if sample is done:
                return
            yield sample

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "depth"):
            raise AttributeError(name)
        return getattr(self.dataset, name)
