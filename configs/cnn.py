"""A small CNN on 32x32 images read from slow storage: the fetch-stalled reference.

Each sample waits `latency_ms` before it arrives, as a read from network storage or a cold
disk does. The wait costs no CPU, so DataLoader workers, even more of them than cores,
hide it behind compute.
"""

import time

import torch
from torch import nn
from torch.utils.data import Dataset


class SlowStorageImages(Dataset):
    def __init__(self, n: int, latency_ms: float, classes: int = 10):
        generator = torch.Generator().manual_seed(0)
        self.labels = torch.randint(0, classes, (n,), generator=generator)
        self.n = n
        self.latency_s = latency_ms / 1000

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        time.sleep(self.latency_s)  # the storage round trip
        generator = torch.Generator().manual_seed(index)
        image = torch.randn(3, 32, 32, generator=generator)
        return image, self.labels[index]


def build_dataset(n: int = 4096, latency_ms: float = 1.0) -> Dataset:
    return SlowStorageImages(n, latency_ms)


def build_model(width: int = 32, classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(width, width * 2, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(width * 2 * 8 * 8, classes),
    )
