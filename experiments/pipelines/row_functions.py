"""Row functions as users write them, each applied row by row: a conditional, an if/elif/else
chain, string methods, a lookup with a floor price, and a label built with str(). The first
four have column forms with the same values; the label's naive one does not (str() of a
missing note is the text "nan", while pandas keeps it missing), so advisor must reject it."""

import pandas as pd
import pipeline_data as data  # beside this file: the child puts this folder on sys.path

data.ensure("notes.csv", data.notes)

TAX = {"north": 0.2, "south": 0.1}


def shipping(row) -> float:
    return 0.0 if row["quantity"] * row["price"] > 100 else 4.99


def tier(row) -> str:
    total = row["quantity"] * row["price"]
    if total > 1000:
        return "gold"
    elif total > 300:
        return "silver"
    elif row["quantity"] > 10 and not row["price"] < 5:
        return "bulk"
    else:
        return "basic"


def region_code(row) -> str:
    return row["region"].strip().lower()[:3]


def tax(row) -> float:
    return TAX.get(row["region"].strip().lower(), 0.05) * max(row["price"], row["floor"])


def label(row) -> str:
    return str(row["note"]).upper()


def transform(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame[frame["note"] != "void"]
    return frame.assign(
        shipping=frame.apply(shipping, axis=1),
        tier=frame.apply(tier, axis=1),
        code=frame.apply(region_code, axis=1),
        tax=frame.apply(tax, axis=1),
        label=frame.apply(label, axis=1),
    )[["order_id", "shipping", "tier", "code", "tax", "label", "note"]]
