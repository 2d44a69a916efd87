"""Inference services with planted bottlenecks, for `kind: infer`.

- `build_encoder` + `encoder_requests`: an fp32 transformer encoder served one request at a
  time, with autograd left on (as a plain `model(x)` call runs): compute-bound.
- `build_slow_start` + `text_requests` + `handle_text`: a classifier that builds a table the
  first time it sees each text length (as lazily compiled kernels or per-shape caches do), behind
  a handler that tokenizes each request in Python: cold starts that recur, into the p95.
- `build_classifier` + `feature_requests`: a small MLP classifier fed one-row requests at a
  Poisson rate close to what one-at-a-time service can take: queueing that batching removes.
"""

from __future__ import annotations

import time

import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, classes: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.0, batch_first=True), layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(ids)).mean(1))


def build_encoder(vocab: int = 2000, dim: int = 256, layers: int = 4, classes: int = 8) -> nn.Module:
    torch.manual_seed(0)
    return Encoder(vocab, dim, layers, classes)


def encoder_requests(n: int = 64, length: int = 64, vocab: int = 2000) -> list:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (1, length), generator=generator) for _ in range(n)]


class SlowStart(nn.Module):
    """The first call for each input length builds a table for it (a per-shape cache)."""

    def __init__(self, vocab: int, dim: int, classes: int, build_s: float):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, dim)
        self.layers = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, classes))
        self.build_s, self.built = build_s, set()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.shape[1] not in self.built:
            time.sleep(self.build_s)
            self.built.add(ids.shape[1])
        return self.layers(self.embed(ids))


def build_slow_start(vocab: int = 4096, dim: int = 128, classes: int = 4, build_s: float = 0.05) -> nn.Module:
    torch.manual_seed(0)
    return SlowStart(vocab, dim, classes, build_s)


WORDS = ("latency", "matters", "for", "every", "request", "that", "a", "client", "sends", "to", "the", "service")


def text_requests(n: int = 64) -> list:
    generator = torch.Generator().manual_seed(2)
    lengths = torch.randint(8, 48, (n,), generator=generator)
    return [" ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (int(length),), generator=generator))
            for length in lengths]


def handle_text(model: nn.Module, text: str) -> torch.Tensor:
    """The user's pre-processing: tokenizing in Python, then the model."""
    ids = []
    for word in text.split():
        value = 0
        for _ in range(40):
            for char in word:
                value = (value * 31 + ord(char)) % 1_000_003
        ids.append(value % 4096)
    return model(torch.tensor([ids]))


def build_classifier(features: int = 512, hidden: int = 2048, classes: int = 10) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, classes))


def feature_requests(n: int = 128, features: int = 512) -> list:
    generator = torch.Generator().manual_seed(3)
    return [torch.randn(1, features, generator=generator) for _ in range(n)]
