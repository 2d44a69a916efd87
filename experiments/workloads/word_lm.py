"""A word-level LSTM language model trained the way pytorch/examples' `word_language_model`
trains its own: an embedding, a two-layer LSTM and a decoder, plain SGD at learning rate 20,
gradients clipped to 0.25, the hidden state carried from batch to batch (detached), through the
user's own step. At that learning rate the trajectory amplifies rounding: the chaotic reference
for the numerics gate.

The corpus is a seeded first-order Markov chain over Zipf-distributed words, built in code: its
next word is predictable in part, so the loss falls as a language model's does.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn
from torch.utils.data import Dataset

BPTT = 35  # the sequence length main.py trains on


class MarkovCorpus(Dataset):
    """Windows of BPTT words and the words after them, from one seeded chain."""

    def __init__(self, words: int, vocab: int, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        zipf = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)  # word frequencies, as in text
        favourites = torch.multinomial(zipf, vocab * 4, replacement=True, generator=generator).view(vocab, 4)
        anywhere = torch.multinomial(zipf, words + 1, replacement=True, generator=generator)
        follows = torch.rand(words + 1, generator=generator) < 0.6
        choice = torch.randint(0, 4, (words + 1,), generator=generator)
        corpus = anywhere.clone()
        for index in range(1, words + 1):  # 60% of words are one of their predecessor's four favourites
            if follows[index]:
                corpus[index] = favourites[corpus[index - 1], choice[index]]
        self.corpus = corpus

    def __len__(self) -> int:
        return (len(self.corpus) - 1) // BPTT

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * BPTT
        return self.corpus[start:start + BPTT], self.corpus[start + 1:start + 1 + BPTT]


def build_dataset(words: int = 40_000, vocab: int = 1000) -> Dataset:
    return MarkovCorpus(words, vocab)


class RNNModel(nn.Module):
    """Embedding, LSTM and decoder, as main.py's model.RNNModel with rnn_type LSTM."""

    def __init__(self, vocab: int, embedding: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab, embedding)
        self.rnn = nn.LSTM(embedding, hidden, layers, dropout=dropout)
        self.decoder = nn.Linear(hidden, vocab)
        self.layers, self.hidden = layers, hidden
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, words: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        output, state = self.rnn(self.drop(self.encoder(words)), state)
        return self.decoder(self.drop(output)).view(-1, self.decoder.out_features), state

    def init_hidden(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        weight = next(self.parameters())
        return (weight.new_zeros(self.layers, batch, self.hidden), weight.new_zeros(self.layers, batch, self.hidden))


def build_model(vocab: int = 1000, embedding: int = 128, hidden: int = 128, layers: int = 2,
                dropout: float = 0.2) -> nn.Module:
    return RNNModel(vocab, embedding, hidden, layers, dropout)


CLIP = 0.25
_hidden: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def train_step(model: nn.Module, batch, optimizer) -> torch.Tensor:
    """main.py's train(): the hidden state carried over, detached; clipped gradients; SGD."""
    words, targets = (tensor.t().contiguous() for tensor in batch)  # (BPTT, batch), as main.py batchifies
    target = model._orig_mod if hasattr(model, "_orig_mod") else model
    state = _hidden.get(target)
    if state is None or state[0].shape[1] != words.shape[1]:
        state = target.init_hidden(words.shape[1])
    model.zero_grad()
    output, state = model(words, tuple(s.detach() for s in state))
    _hidden[target] = state
    loss = nn.functional.cross_entropy(output.float(), targets.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    optimizer.step()
    return loss
