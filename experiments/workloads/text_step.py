"""A small transformer encoder trained through the user's own step: dict batches, gradient
accumulation, clipping and a cosine schedule inside `train_step`; the input-prep-bound
reference for user steps.

Each sample is tokenized in `__getitem__` by a slow pure-Python tokenizer (CPU work, as text
preprocessing often is), and `collate` pads every batch to its longest text. DataLoader
workers move the tokenizing off the training process.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn
from torch.utils.data import Dataset

VOCAB = 1024
WORDS = ("the", "model", "trains", "on", "short", "texts", "whose", "tokens", "arrive", "slowly", "because",
         "tokenizing", "costs", "python", "time", "per", "sample")


class SlowTokenizedTexts(Dataset):
    def __init__(self, n: int, rounds: int, classes: int):
        self.n, self.rounds, self.classes = n, rounds, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict:
        generator = torch.Generator().manual_seed(index)
        length = int(torch.randint(12, 48, (1,), generator=generator))
        words = [WORDS[int(i)] for i in torch.randint(0, len(WORDS), (length,), generator=generator)]
        return {"input_ids": torch.tensor([self.token(word) for word in words]), "label": index % self.classes}

    def token(self, word: str) -> int:
        value = 0
        for _ in range(self.rounds):  # a tokenizer's work, in Python
            for char in word:
                value = (value * 31 + ord(char)) % 1_000_003
        return value % VOCAB


def build_dataset(n: int = 2048, rounds: int = 60, classes: int = 4) -> Dataset:
    return SlowTokenizedTexts(n, rounds, classes)


def collate(samples: list[dict]) -> dict:
    """Pads to the longest text of the batch; the mask marks real tokens."""
    longest = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), longest, dtype=torch.long)
    mask = torch.zeros(len(samples), longest, dtype=torch.long)
    for row, sample in enumerate(samples):
        ids[row, : len(sample["input_ids"])] = sample["input_ids"]
        mask[row, : len(sample["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([s["label"] for s in samples])}


class TinyEncoder(nn.Module):
    def __init__(self, dim: int, layers: int, classes: int):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.0, batch_first=True) for _ in range(layers)
        )
        self.head = nn.Linear(dim, classes)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, src_key_padding_mask=attention_mask == 0)
        mask = attention_mask.unsqueeze(-1).to(x.dtype)
        return self.head((x * mask).sum(1) / mask.sum(1))


def build_model(dim: int = 64, layers: int = 2, classes: int = 4) -> nn.Module:
    return TinyEncoder(dim, layers, classes)


ACCUMULATE = 2
_schedules: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def cosine_schedule(optimizer) -> torch.optim.lr_scheduler.LRScheduler:
    if optimizer not in _schedules:
        _schedules[optimizer] = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=1000)
    return _schedules[optimizer]


def train_step(model: nn.Module, batch: dict, optimizer) -> torch.Tensor:
    """The user's step: two accumulated halves, clipped gradients, a cosine learning rate."""
    schedule = cosine_schedule(optimizer)
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros(())
    for ids, mask, labels in zip(*(batch[key].tensor_split(ACCUMULATE) for key in ("input_ids", "attention_mask", "labels"))):
        loss = nn.functional.cross_entropy(model(ids, mask), labels) / ACCUMULATE
        loss.backward()
        total += loss.detach()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    return total
