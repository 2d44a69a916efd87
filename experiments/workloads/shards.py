"""Samples read from sharded storage, where each process must open the shard index before its
first read (a connection, an LMDB environment, a memory-mapped index): the two-knob reference.

Opening costs `open_ms` once per process; each sample then waits `latency_ms` on storage. The
epoch is short, so a DataLoader that starts its workers afresh every epoch pays the opening
again and again: workers alone are slower than none, and `persistent_workers` alone does
nothing without workers. Only the two together hide the storage wait.
"""

import os
import time

import torch
from torch import nn
from torch.utils.data import Dataset


class ShardedStorage(Dataset):
    def __init__(self, n: int, latency_ms: float, open_ms: float, features: int, classes: int = 10):
        generator = torch.Generator().manual_seed(0)
        self.inputs = torch.randn(n, features, generator=generator)
        self.labels = torch.randint(0, classes, (n,), generator=generator)
        self.latency_s, self.open_s = latency_ms / 1000, open_ms / 1000
        self.opened_in = None  # the process that opened the index

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        if self.opened_in != os.getpid():  # a fresh worker process: open the index first
            time.sleep(self.open_s)
            self.opened_in = os.getpid()
        time.sleep(self.latency_s)
        return self.inputs[index], self.labels[index]


def build_dataset(n: int = 256, latency_ms: float = 2.0, open_ms: float = 800.0, features: int = 64) -> Dataset:
    return ShardedStorage(n, latency_ms, open_ms, features)


def build_model(features: int = 64, hidden: int = 256, classes: int = 10) -> nn.Module:
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, classes))
