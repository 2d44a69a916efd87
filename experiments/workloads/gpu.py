"""GPU-sized reference jobs for the device check (`python -m experiments.gpu_check`).

- `build_resnet` + `augmented_images`: a small residual CNN fed 64x64 images that each cost CPU
  time to decode and augment in the process that loads them: the GPU starves (input-prep).
- `build_encoder` + `token_batches`: an fp32 transformer encoder wide enough for tensor cores,
  its samples in memory, trained with AdamW: compute-bound.
- The service uses `experiments/workloads/serve.py`'s encoder, at GPU size.

Every size is a keyword argument, so the same code runs small on a CPU (`--device cpu`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset


class AugmentedImages(Dataset):
    """Images decoded and augmented on the CPU, sample by sample, as an image folder's are."""

    def __init__(self, n: int, size: int, passes: int, classes: int = 100):
        self.n, self.size, self.passes, self.classes = n, size, passes, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        rng = np.random.default_rng(index)
        image = rng.integers(0, 256, (self.size + 8, self.size + 8, 3), dtype=np.uint8)  # the decoded file
        for _ in range(self.passes):  # the augmentation chain: jitter and blur, in float
            pixels = image.astype(np.float32) * rng.uniform(0.8, 1.2) + rng.normal(0, 4, image.shape)
            pixels = (pixels + np.roll(pixels, 1, 0) + np.roll(pixels, 1, 1)) / 3
            image = np.clip(pixels, 0, 255).astype(np.uint8)
        top, left = rng.integers(0, 9, 2)
        crop = image[top:top + self.size, left:left + self.size]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        tensor = torch.from_numpy(np.ascontiguousarray(crop.transpose(2, 0, 1))).float().div_(255).sub_(0.5)
        return tensor, index % self.classes


def augmented_images(n: int = 8192, size: int = 64, passes: int = 3) -> Dataset:
    return AugmentedImages(n, size, passes)


class Residual(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.body(x))


def build_resnet(width: int = 64, blocks: int = 4, classes: int = 100) -> nn.Module:
    torch.manual_seed(0)
    stages = [nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    for index in range(blocks):
        stages.append(Residual(width))
        if index % 2 == 1:
            stages.append(nn.MaxPool2d(2))
    return nn.Sequential(*stages, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, classes))


class Tokens(Dataset):
    """Token sequences and a label each, made once and held in memory."""

    def __init__(self, n: int, length: int, vocab: int, classes: int):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=generator)
        self.labels = torch.randint(0, classes, (n,), generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        return self.ids[index], self.labels[index]


def token_batches(n: int = 2048, length: int = 256, vocab: int = 8192, classes: int = 16) -> Dataset:
    return Tokens(n, length, vocab, classes)


class Encoder(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, classes: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True), layers,
            enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(ids)).mean(1))


def build_encoder(vocab: int = 8192, dim: int = 1024, layers: int = 6, heads: int = 16, classes: int = 16) -> nn.Module:
    torch.manual_seed(0)
    return Encoder(vocab, dim, layers, heads, classes)
