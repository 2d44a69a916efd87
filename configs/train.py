"""A CNN trained as people write a first script: argparse, a Dataset whose samples come from
slow storage, a DataLoader with its defaults, an optimizer, a checkpoint and a metrics file
written every epoch. No builders: `advisor optimize -- python train.py` measures it as is (or configs/script.yaml)."""

import argparse
import json
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class RemoteImages(Dataset):
    """Each image waits on storage before it arrives (a network share, a cold disk)."""

    def __init__(self, n, latency_ms):
        self.labels = torch.randint(0, 10, (n,), generator=torch.Generator().manual_seed(0))
        self.latency_s = latency_ms / 1000

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        time.sleep(self.latency_s)
        image = torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(index))
        return image, self.labels[index]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=2.0)
    parser.add_argument("--images", type=int, default=4096)
    parser.add_argument("--out", default="runs")
    args = parser.parse_args()

    torch.manual_seed(0)
    loader = DataLoader(RemoteImages(args.images, args.latency_ms), batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    os.makedirs(args.out, exist_ok=True)
    for epoch in range(args.epochs):
        started, steps = time.time(), 0
        for images, labels in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            steps += 1
        print(f"epoch {epoch}: loss {loss.item():.3f}, {steps / (time.time() - started):.1f} steps/s")
        torch.save(model.state_dict(), os.path.join(args.out, "checkpoint.pt"))
        with open("metrics.json", "w") as handle:
            json.dump({"epoch": epoch, "loss": loss.item()}, handle)


if __name__ == "__main__":
    main()
