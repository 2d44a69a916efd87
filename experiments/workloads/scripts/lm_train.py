"""A word-level language model trained the way pytorch/examples' word_language_model/main.py
trains one: argparse, the token stream batchified by hand (no DataLoader), plain SGD written
out as `p.data.add_` with gradient clipping (no optimizer object), `model.pt` saved after each
epoch. The corpus is a seeded Markov chain over a small vocabulary, made in memory."""

import argparse
import time

import torch
from lm_model import RNNModel
from torch import nn


def markov_corpus(tokens, vocabulary):
    generator = torch.Generator().manual_seed(0)
    successors = torch.randint(0, vocabulary, (vocabulary, 4), generator=generator)
    stream, word = torch.empty(tokens, dtype=torch.long), 0
    choices = torch.randint(0, 4, (tokens,), generator=generator)
    for index in range(tokens):
        stream[index] = word
        word = int(successors[word, choices[index]])
    return stream


def batchify(stream, batch):
    return stream[: len(stream) // batch * batch].view(batch, -1).t().contiguous()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=20.0)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--save", default="model.pt")
    args = parser.parse_args()

    torch.manual_seed(1111)
    vocabulary = 1000
    train = batchify(markov_corpus(60_000, vocabulary), args.batch_size)
    model = RNNModel(vocabulary)
    for epoch in range(args.epochs):
        model.train()
        hidden = model.init_hidden(args.batch_size)
        started, steps = time.time(), 0
        for i in range(0, train.size(0) - 1 - args.bptt, args.bptt):
            data, targets = train[i:i + args.bptt], train[i + 1:i + 1 + args.bptt].reshape(-1)
            hidden = tuple(h.detach() for h in hidden)
            model.zero_grad()
            output, hidden = model(data, hidden)
            loss = nn.functional.cross_entropy(output, targets)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-args.lr)
            steps += 1
        print(f"epoch {epoch}: loss {loss.item():.2f}, {steps / (time.time() - started):.1f} steps/s")
        with open(args.save, "wb") as handle:
            torch.save(model, handle)


if __name__ == "__main__":
    main()
