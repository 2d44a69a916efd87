"""A Hugging Face BERT classifier built from a small config in code (nothing downloaded),
trained by advisor's own loop: dict batches called as `model(**batch)`, the loss from the
output's `.loss`. The fetch-stalled reference for Hugging Face models: every sample waits on
storage. transformers is imported only here, never by advisor.
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset


class SlowStorageTokens(Dataset):
    def __init__(self, n: int, length: int, vocab: int, latency_ms: float, classes: int):
        self.n, self.length, self.vocab, self.latency_s, self.classes = n, length, vocab, latency_ms / 1000, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict:
        time.sleep(self.latency_s)  # the storage round trip
        generator = torch.Generator().manual_seed(index)
        return {
            "input_ids": torch.randint(0, self.vocab, (self.length,), generator=generator),
            "attention_mask": torch.ones(self.length, dtype=torch.long),
            "labels": torch.tensor(index % self.classes),
        }


def build_dataset(n: int = 2048, length: int = 32, vocab: int = 512, latency_ms: float = 2.0, classes: int = 4) -> Dataset:
    return SlowStorageTokens(n, length, vocab, latency_ms, classes)


def build_model(hidden: int = 64, layers: int = 2, vocab: int = 512, classes: int = 4):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=4 * hidden, max_position_embeddings=64, num_labels=classes,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertForSequenceClassification(config)
