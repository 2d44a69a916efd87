"""A small CNN whose images are augmented on the CPU, sample by sample, in whichever process loads
them: about a third of the step waits on that prep, the rest is the model's convolutions, and
each step hands back and maps again tens of MB (the allocator's case).
"""

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset


class AugmentedImages(Dataset):
    def __init__(self, n: int, size: int, smoothing: int):
        self.n, self.size, self.smoothing = n, size, smoothing

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        rng = np.random.default_rng(index)
        image = rng.random((3, self.size + 8, self.size + 8), dtype=np.float32)
        for _ in range(self.smoothing):  # the CPU-heavy part: a blur, pass after pass
            image = 0.5 * (image + np.roll(image, 1, axis=2))
        top, left = rng.integers(0, 8, size=2)
        image = image[:, top:top + self.size, left:left + self.size]
        if rng.random() < 0.5:
            image = image[:, :, ::-1]
        return torch.from_numpy(np.ascontiguousarray(image)), int(index % 10)


def build_dataset(n: int = 4096, size: int = 64, smoothing: int = 40) -> Dataset:
    return AugmentedImages(n, size, smoothing)


def build_model(width: int = 16) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.Conv2d(width, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * width * 16 * 16, 128), nn.ReLU(), nn.Linear(128, 10))
