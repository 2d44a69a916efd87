"""MLPs over features already in memory: the compute-bound, memory and overhead references.

- compute-bound: a wide MLP, so a few large matrix multiplies fill each step;
- memory: a deep, narrow MLP on a large batch, whose stored activations pass the budget;
- overhead: a deep stack of tiny layers, so each step is hundreds of short operators.
"""

import torch
from torch import nn
from torch.utils.data import Dataset


class InMemoryFeatures(Dataset):
    def __init__(self, n: int, features: int, classes: int):
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, features, generator=generator)
        self.y = torch.randint(0, classes, (n,), generator=generator)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):
        return self.x[index], self.y[index]


def build_dataset(n: int = 4096, features: int = 512, classes: int = 10) -> Dataset:
    return InMemoryFeatures(n, features, classes)


def build_model(features: int = 512, hidden: int = 2048, depth: int = 3, classes: int = 10) -> nn.Module:
    layers: list[nn.Module] = []
    width = features
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.GELU()]
        width = hidden
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)
