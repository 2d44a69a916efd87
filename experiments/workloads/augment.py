"""An MLP over signals that are prepared with CPU-heavy transforms: the prep-stalled reference.

Each sample is synthesised and then filtered by a chain of NumPy passes, on the CPU, in
whichever process loads it; the model itself is light.
"""

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset


class AugmentedSignals(Dataset):
    def __init__(self, n: int, length: int, passes: int, classes: int = 10):
        self.n, self.length, self.passes, self.classes = n, length, passes, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        rng = np.random.default_rng(index)
        signal = rng.standard_normal(self.length)
        for _ in range(self.passes):  # the expensive augmentation chain
            signal = np.sort(signal + 0.01 * rng.standard_normal(self.length))
            signal = np.convolve(signal, np.ones(5) / 5, mode="same")
        features = torch.from_numpy(signal[:256].astype(np.float32))
        return features, index % self.classes


def build_dataset(n: int = 4096, length: int = 4096, passes: int = 4) -> Dataset:
    return AugmentedSignals(n, length, passes)


def build_model(hidden: int = 128, classes: int = 10) -> nn.Module:
    return nn.Sequential(nn.Linear(256, hidden), nn.ReLU(), nn.Linear(hidden, classes))
