"""A Parquet cache of a text source: parse once, then read columnar binary on every later run.
The one-off cost, and the number of runs after which it pays off, are reported with it."""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Optional

from advisor.recipes.base import Choice, Context, Recipe, reader

CHUNK_ROWS = 250_000  # rows parsed at a time while building the cache


def why_not(context: Context) -> Optional[str]:
    if context.source_format == "parquet":
        return "the source is already Parquet"
    return None


def snippet(plan: dict) -> str:
    return ('cache = Path("source.parquet")  # once, and again whenever the source changes:\n'
            "if not cache.exists():\n"
            f"    {reader(plan)}.to_parquet(cache)  # the same reader and arguments as today\n"
            "frame = pd.read_parquet(cache)")


def cache_cost(runs: list, reference_runs: list, per: str = "run") -> dict:
    """The cache's one-off build time, and the runs after which it has paid for itself."""
    build = max((r.stages.get("cache_build_s", {}).get("wall_s", 0.0) for r in runs if r.ok), default=0.0)
    saved = _mean_wall(reference_runs) - _mean_wall(runs)
    return {"what": "building the cache", "seconds": build,
            "paid_back_after": math.ceil(build / saved) if saved > 0 else None, "per": "run"}


def _mean_wall(runs: list) -> float:
    good = [r.stages["wall_s"] for r in runs if r.ok and r.stages]
    return sum(good) / len(good) if good else 0.0


def prepare(run, plan: dict):
    """A text source read from its Parquet cache, built first where there is none; what
    building it cost (now, or when it was built) is the run's one-off setup."""
    if plan.get("pipeline.parquet_cache") and run.fmt != "parquet":
        run.files, run.setup["cache_build_s"] = cached(run)
        run.fmt = "parquet"
    return run


def cached(run) -> tuple[list[Path], float]:
    """The source converted to Parquet once (the baseline's own parse), beside the config in
    advisor's folder; reused while the source files and the read arguments are unchanged.
    Returns the cached files and what building them cost."""
    config = run.config
    folder = config.root / "advisor-cache" / config.name / "parquet"
    folder.mkdir(parents=True, exist_ok=True)
    cost, files = 0.0, []
    for path in run.files:
        stat = path.stat()
        key = json.dumps([str(path), stat.st_size, stat.st_mtime_ns, config.workload.source.read_args], sort_keys=True)
        target = folder / f"{path.stem}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.parquet"
        receipt = target.with_suffix(".json")
        if not (target.exists() and receipt.exists()):  # without its receipt, its cost is unknown: rebuild
            started = time.perf_counter()
            partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
            _write_in_chunks(run.chunks(path, CHUNK_ROWS, run.as_the_baseline_reads()), partial)
            partial.rename(target)  # never a half-written cache
            receipt.write_text(json.dumps({"build_s": time.perf_counter() - started}))
        cost += json.loads(receipt.read_text())["build_s"] if receipt.exists() else 0.0
        files.append(target)
    return files, cost


def _write_in_chunks(chunks, target: Path) -> None:
    """The parsed chunks written one by one, so that building the cache does not need the memory
    of a whole-file read; every chunk takes the first chunk's column types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer, schema = None, None
    try:
        for chunk in chunks:
            table = pa.Table.from_pandas(chunk, preserve_index=False)
            if writer is None:
                schema = table.schema
                writer = pq.ParquetWriter(target, schema)
            writer.write_table(table.cast(schema))
    finally:
        if writer is not None:
            writer.close()


RECIPE = Recipe(
    name="parquet_cache",
    summary="cache the parsed source as Parquet",
    targets=("parse", "io"),
    risk="exact",
    keys=("pipeline.parquet_cache",),
    idle=lambda plan: frozenset({"pipeline.engine"} if plan.get("pipeline.parquet_cache") else ()),  # no text to parse
    why_not=why_not,
    space=lambda context: {"pipeline.parquet_cache": Choice((False, True))},
    snippet=snippet,
    textbook=lambda context: {"pipeline.parquet_cache": True},
    kinds=("pipeline",),
    one_off_cost=cache_cost,
    hooks={"prepare": prepare},
    off={"pipeline.parquet_cache": False},
)
