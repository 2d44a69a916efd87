"""Planted bottleneck: memory. A CSV whose whole-file read does not fit the memory budget,
reduced to a small per-user summary: partition-safe, with a combine for the partial sums."""

import pandas as pd
import pipeline_data as data  # beside this file: the child puts this folder on sys.path

data.ensure("events.csv", data.events)


def transform(frame: pd.DataFrame) -> pd.DataFrame:
    bought = frame[frame["kind"] == "buy"]
    return bought.groupby("user", as_index=False).agg(spent=("value", "sum"), buys=("value", "size"))


def combine(parts: list) -> pd.DataFrame:
    return pd.concat(parts).groupby("user", as_index=False)[["spent", "buys"]].sum()
