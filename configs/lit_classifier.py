"""A LightningModule and its LightningDataModule, as a Lightning user writes them: the
module's training_step logs and returns the loss, configure_optimizers returns AdamW with a
per-step schedule, and the datamodule's train_dataloader() reads images from slow storage
with no workers. The fetch-stalled reference for `kind: lightning`.
"""

from __future__ import annotations

import time

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowStorageImages(Dataset):
    def __init__(self, n: int, latency_ms: float, classes: int = 10):
        self.n, self.latency_s, self.classes = n, latency_ms / 1000, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        time.sleep(self.latency_s)  # the storage round trip
        generator = torch.Generator().manual_seed(index)
        return torch.randn(3, 16, 16, generator=generator), index % self.classes


class LitClassifier(pl.LightningModule):
    def __init__(self, width: int = 32, classes: int = 10, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(width * 8 * 8, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.9)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class SlowImages(pl.LightningDataModule):
    def __init__(self, batch_size: int = 64, n: int = 2048, latency_ms: float = 1.0):
        super().__init__()
        self.batch_size, self.n, self.latency_ms = batch_size, n, latency_ms

    def setup(self, stage: str) -> None:
        self.train = SlowStorageImages(self.n, self.latency_ms)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True, num_workers=0)


class NoStep(pl.LightningModule):
    """A module that forgot its training_step (bad input for the tests)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 2)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
