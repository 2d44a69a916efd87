"""A small GPT trained the way the most copied training scripts do it: tokens in a memory-mapped
file, random windows sliced out each step with no DataLoader, AdamW, a checkpoint at an
absolute path given on the command line. `advisor optimize -- python gpt_memmap.py` measures it
as is. `--make-data` writes the token file first (a run of its own)."""

import argparse
import os
import time

import numpy as np
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, vocabulary, block, width, layers, heads):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocabulary, width), nn.Embedding(block, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.head = nn.Linear(width, vocabulary)
        self.register_buffer("mask", torch.triu(torch.full((block, block), float("-inf")), 1))

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x, self.mask[: ids.shape[1], : ids.shape[1]])
        return self.head(x)


def get_batch(data, block, batch):
    starts = torch.randint(len(data) - block - 1, (batch,))
    x = torch.stack([torch.from_numpy(data[i:i + block].astype(np.int64)) for i in starts.tolist()])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block].astype(np.int64)) for i in starts.tolist()])
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="tokens.bin")
    parser.add_argument("--make-data", action="store_true")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)  # an epoch, for the log
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--out", default=os.path.join(os.path.expanduser("~"), "gpt-checkpoints"))
    args = parser.parse_args()
    vocabulary = 512
    if args.make_data:
        np.random.default_rng(0).integers(0, vocabulary, 2_000_000, dtype=np.uint16).tofile(args.data)
        return
    data = np.memmap(args.data, dtype=np.uint16, mode="r")
    torch.manual_seed(0)
    model = GPT(vocabulary, args.block, width=128, layers=2, heads=4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    os.makedirs(args.out, exist_ok=True)
    for epoch in range(args.epochs):
        started = time.time()
        for _ in range(args.steps):
            x, y = get_batch(data, args.block, args.batch_size)
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.3f}, {args.steps / (time.time() - started):.1f} steps/s")
        torch.save(model.state_dict(), os.path.join(args.out, "ckpt.pt"))


if __name__ == "__main__":
    main()
