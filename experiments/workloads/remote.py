"""Feature vectors behind a network round trip: the fetch-bound reference past the process cap.

Each sample waits `latency_ms` on remote storage and costs almost no CPU (its features sit in a
tensor already; the wait is the round trip). The model is a small MLP, so the step, fed from
memory, runs far faster than one process can fetch: worker processes alone cap out at a few per
core, while threads inside each of them hold many fetches in flight at once.
"""

import time

import torch
from torch import nn
from torch.utils.data import Dataset


class RemoteFeatures(Dataset):
    def __init__(self, n: int, features: int, latency_ms: float, classes: int = 10):
        generator = torch.Generator().manual_seed(0)
        self.features = torch.randn(n, features, generator=generator)
        self.labels = torch.randint(0, classes, (n,), generator=generator)
        self.latency_s = latency_ms / 1000

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        time.sleep(self.latency_s)  # the storage round trip
        return self.features[index], self.labels[index]


def build_dataset(n: int = 16384, features: int = 128, latency_ms: float = 2.0) -> Dataset:
    return RemoteFeatures(n, features, latency_ms)


def build_model(features: int = 128, hidden: int = 256, classes: int = 10) -> nn.Module:
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))
