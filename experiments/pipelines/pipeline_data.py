"""Deterministic source files for the reference pipelines, written once on first use.

The reference pipelines' modules call `ensure` when imported, so `advisor optimize` on their
configs works on a fresh clone: the files land in experiments/pipelines/data/ (git-ignored),
written to a temporary name and renamed, so concurrent first runs never see half a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

DATA = Path(__file__).resolve().parent / "data"


def ensure(name: str, make: Callable[[np.random.Generator], pd.DataFrame]) -> Path:
    path = DATA / name
    if not path.exists():
        DATA.mkdir(exist_ok=True)
        partial = path.with_name(f".{name}.{os.getpid()}.partial")
        frame = make(np.random.default_rng(0))
        if path.suffix == ".jsonl":
            frame.to_json(partial, orient="records", lines=True)
        else:
            frame.to_csv(partial, index=False)
        partial.rename(path)
    return path


def sales(rng: np.random.Generator, rows: int = 400_000) -> pd.DataFrame:
    """Wide sales records, as an export writes them: ten fields, of which the report reads three."""
    return pd.DataFrame({
        "order_id": np.arange(rows),
        "store": rng.integers(0, 200, rows),
        "region": rng.choice(["north", "south", "east", "west"], rows),
        "sku": rng.integers(0, 50_000, rows),
        "quantity": rng.integers(1, 20, rows),
        "price": rng.uniform(1, 500, rows).round(2),
        "discount": rng.uniform(0, 0.3, rows).round(3),
        "customer": rng.integers(0, 1_000_000, rows),
        "channel": rng.choice(["web", "store", "phone"], rows),
        "note": rng.choice(["", "gift", "rush", "fragile", "returning customer"], rows),
    })


def orders(rng: np.random.Generator, rows: int = 1_200_000) -> pd.DataFrame:
    return pd.DataFrame({
        "order_id": np.arange(rows),
        "region": rng.choice(["north", "south", "east", "west"], rows),
        "quantity": rng.integers(1, 20, rows),
        "price": rng.uniform(1, 500, rows).round(2),
        "discount": rng.uniform(0, 0.3, rows).round(3),
    })


def events(rng: np.random.Generator, rows: int = 6_000_000) -> pd.DataFrame:
    return pd.DataFrame({
        "user": rng.integers(0, 5_000, rows),
        "kind": rng.choice(["view", "click", "buy"], rows, p=[0.8, 0.15, 0.05]),
        "value": rng.uniform(0, 100, rows).round(2),
        "ms": rng.integers(1, 60_000, rows),
    })


def notes(rng: np.random.Generator, rows: int = 300_000) -> pd.DataFrame:
    """Orders as a shop exports them: padded region names, a minimum price that is sometimes
    missing, and a free-text note that is empty for most orders (missing once parsed)."""
    return pd.DataFrame({
        "order_id": np.arange(rows),
        "region": rng.choice(["north", " south", "East ", "west"], rows),
        "quantity": rng.integers(1, 20, rows),
        "price": rng.uniform(1, 100, rows).round(2),
        "floor": np.where(rng.random(rows) < 0.1, np.nan, rng.uniform(1, 100, rows).round(2)),
        "note": rng.choice(["", "", "", "gift", "rush", "void"], rows),
    })
