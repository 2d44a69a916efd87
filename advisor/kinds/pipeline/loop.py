"""The pandas pipeline the user runs, under a plan: read, transform, combine, write.

Modes:
  full     timed, stage by stage (wall and CPU seconds per stage, rows/s over the whole run).
  profile  the transform under a sampling profiler that charges time to the user's own source
           lines; plus what recipes need to know: the columns the transform reads (found by
           dropping each in turn on a sample) and the low-cardinality text columns. Never timed.

Plan keys (all `pipeline.*`): engine (None | "pyarrow"), dtype_backend (None | "pyarrow"),
categories and columns (None | comma-joined names), parquet_cache (bool), chunksize (rows),
dask_workers (None | n; with a scheduler address in the config, any n means "that cluster"),
dask_scheduler ("distributed": a LocalCluster | "processes": Dask's local process pool), dask_partitions.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import pandas as pd

from advisor.config import AdvisorConfig
from advisor.errors import UserError
from advisor.frames import checked, comparable, keep_frame
from advisor.measure import descendants_cpu_seconds, machine_busy_seconds, other_cpu_share, tree_memory
from advisor.recipes import applied

SAMPLE_ROWS = 2000  # rows the profile run's column probes work on
CHECK_ROWS = 20_000  # rows on which each row function's rewrite is computed beside it (the vectorise recipe)
PROFILE_INTERVAL_S = 0.002
LOW_CARDINALITY = 0.05  # distinct values per row below which a text column becomes a category
SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".json": "jsonl"}


@dataclass(frozen=True)
class PipelineCode:
    """The user's pipeline, resolved to callables."""

    transform: Callable[[pd.DataFrame], pd.DataFrame]
    combine: Optional[Callable[[list], pd.DataFrame]]
    roots: tuple[str, ...]  # folders of the user's code: the profiler charges time to files under them


def source_files(config: AdvisorConfig) -> list[Path]:
    pattern = config.workload.source.path
    path = Path(pattern)
    full = str(path if path.is_absolute() else config.root / path)
    found = sorted(Path(p) for p in glob.glob(full)) if glob.has_magic(full) else [Path(full)] if Path(full).is_file() else []
    if not found:
        raise UserError(f"workload.source.path: no file matches {full}; paths resolve relative to {config.root}")
    return found


def source_format(config: AdvisorConfig, files: list[Path]) -> str:
    if config.workload.source.format:
        return config.workload.source.format
    formats = {SUFFIXES.get(f.suffix.lower()) for f in files}
    if len(formats) != 1 or None in formats:
        raise UserError(f"workload.source.format: cannot tell the format from {files[0].name}; "
                        f"set it to one of {', '.join(SOURCE_FORMATS)}")
    return formats.pop()


# ---------------------------------------------------------------- reading


def read_options(fmt: str, plan: dict, read_args: dict) -> dict:
    """Keyword arguments for the pandas reader of `fmt`: the config's own, then the plan's recipes'."""
    options = {**read_args, **({"lines": True} if fmt == "jsonl" else {})}
    return applied("read_options", options, plan, fmt=fmt)


def read_file(path: Path, fmt: str, options: dict) -> pd.DataFrame:
    if fmt == "parquet":
        return pd.read_parquet(path, **options)
    if fmt == "jsonl":
        frame = pd.read_json(path, **options)
        return frame
    return pd.read_csv(path, **options)


def after_read(frame: pd.DataFrame, fmt: str, plan: dict) -> pd.DataFrame:
    """What the readers cannot do themselves, by the plan's recipes (prune and categorise JSON lines)."""
    return applied("after_read", frame, plan, fmt=fmt)


def read_chunks(path: Path, fmt: str, options: dict, chunksize: int) -> Iterator[pd.DataFrame]:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        backend = options.get("dtype_backend")
        for batch in pq.ParquetFile(path).iter_batches(batch_size=chunksize, columns=options.get("columns")):
            frame = batch.to_pandas(types_mapper=pd.ArrowDtype if backend == "pyarrow" else None)
            yield frame
        return
    options = {k: v for k, v in options.items() if not (k == "engine" and v == "pyarrow")}  # pyarrow can't chunk
    with (pd.read_json if fmt == "jsonl" else pd.read_csv)(path, chunksize=chunksize, **options) as reader:
        yield from reader


# ---------------------------------------------------------------- timing


class Stages:
    """Wall and CPU seconds per stage; stages may be entered many times (once per chunk)."""

    def __init__(self) -> None:
        self.wall: Counter = Counter()
        self.cpu: Counter = Counter()

    @contextmanager
    def stage(self, name: str):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.wall[name] += time.perf_counter() - wall
            self.cpu[name] += time.process_time() - cpu

    def to_dict(self) -> dict:
        return {name: {"wall_s": self.wall[name], "cpu_s": self.cpu[name]} for name in self.wall}



def finish(parts: list[pd.DataFrame], code: PipelineCode, stages: Stages) -> pd.DataFrame:
    with stages.stage("combine"):
        if code.combine is not None:
            return checked(code.combine(parts), "workload.combine")
        return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


@dataclass
class PipelineRun:
    """One run of a pipeline as the recipes that change it see it (their `prepare` and `execute`
    hooks): its source, how it is read, the user's code, and its stages' clocks."""

    config: AdvisorConfig
    plan: dict
    code: PipelineCode
    files: list[Path]
    fmt: str
    stages: Stages = field(default_factory=lambda: Stages())
    setup: dict = field(default_factory=dict)  # one-off costs paid before the timed run (a cache's build)
    options: dict = field(default_factory=dict)  # the reader's keyword arguments, once the source is settled

    def read(self, path: Path) -> pd.DataFrame:
        return after_read(read_file(path, self.fmt, self.options), self.fmt, self.plan)

    def chunks(self, path: Path, rows: int, options: Optional[dict] = None) -> Iterator[pd.DataFrame]:
        """The file `rows` at a time, read with `options` (default: the run's own)."""
        return read_chunks(path, self.fmt, self.options if options is None else options, rows)

    def as_the_baseline_reads(self) -> dict:
        """The reader's arguments with no recipe applied: the source as the user parses it."""
        return read_options(self.fmt, {}, self.config.workload.source.read_args)

    def after_read(self, frame: pd.DataFrame) -> pd.DataFrame:
        return after_read(frame, self.fmt, self.plan)

    def transform(self, frame: pd.DataFrame) -> pd.DataFrame:
        return checked(self.code.transform(frame))

    def part_transform(self) -> Callable[[pd.DataFrame], pd.DataFrame]:
        """The transform of one part just read, as a function other processes can unpickle: a
        closure, which plain pickle refuses, so Dask pickles it with cloudpickle, which carries
        the user's functions by value (a cluster's scheduler cannot import the user's files)."""
        transform, fmt, plan = self.code.transform, self.fmt, self.plan
        return lambda part: checked(transform(after_read(part, fmt, plan)))

    def finish(self, parts: list[pd.DataFrame]) -> pd.DataFrame:
        return finish(parts, self.code, self.stages)


def run_whole(run: PipelineRun) -> tuple[pd.DataFrame, int]:
    """The whole source read into one frame, then transformed: the user's own way."""
    with run.stages.stage("read"):
        frames = [run.read(path) for path in run.files]
        frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    with run.stages.stage("transform"):
        output = run.transform(frame)
    return output, len(frame)


# ---------------------------------------------------------------- the run


def run(config: AdvisorConfig, code: PipelineCode, plan: dict, mode: str, output_path: Optional[str],
        scratch: Optional[str] = None) -> dict:
    """Runs the pipeline under the plan; returns the measurement fields seen from inside."""
    files = source_files(config)
    fmt = source_format(config, files)
    if mode == "profile":
        return profile(config, code, files, fmt)
    started = time.perf_counter()
    run = applied("prepare", PipelineRun(config, plan, code, files, fmt), plan)  # rewritten code, a cached source
    run.options = read_options(run.fmt, plan, config.workload.source.read_args)
    stages, setup = run.stages, run.setup
    wall_start, cpu_start = time.perf_counter(), time.process_time()
    busy_start, tree_cpu_start = machine_busy_seconds(), descendants_cpu_seconds(os.getpid())
    output, rows = applied("execute", run_whole, plan)(run)  # chunks or Dask, where the plan says
    if config.workload.sink and scratch:  # the sink's format, timed, into advisor's own run folder: never the user's file
        with stages.stage("write"):
            write(output, Path(scratch) / f"sink{Path(config.workload.sink).suffix}")
    wall = time.perf_counter() - wall_start
    tree_cpu = time.process_time() - cpu_start + descendants_cpu_seconds(os.getpid()) - tree_cpu_start
    others = other_cpu_share(machine_busy_seconds() - busy_start, tree_cpu, wall)
    memory_end = tree_memory(os.getpid())  # with Dask's workers alive; the high-water mark misses no peak
    if output_path:
        keep_frame(output, output_path)
    return {
        "samples": rows,
        "samples_per_s": rows / wall if wall > 0 else 0.0,
        "step_ms_mean": 1000 * wall,
        "step_ms_p50": 1000 * wall,
        "step_ms_p95": 1000 * wall,
        "other_cpu_share": others,
        "cpu_util": min(1.0, (time.process_time() - cpu_start) / wall / (os.cpu_count() or 1)) if wall > 0 else 0.0,
        "stages": {"wall_s": wall, **stages.to_dict(), **{k: {"wall_s": v, "cpu_s": v} for k, v in setup.items()}},
        "output": {"path": output_path, "rows": len(output), "columns": [str(c) for c in output.columns]},
        "setup_s": time.perf_counter() - started - wall,
        "memory_end": memory_end.to_dict(),
        "environment": {"kind": "pipeline", "format": fmt, "rows": rows, "columns": source_columns(files[0], fmt),
                        "source_bytes": sum(f.stat().st_size for f in files)},
    }


def source_columns(path: Path, fmt: str) -> list[str]:
    """The source's column names, from its header alone (they are part of the fingerprint)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    if fmt == "jsonl":
        with open(path) as handle:
            return list(json.loads(handle.readline() or "{}"))
    return [str(c) for c in pd.read_csv(path, nrows=0).columns]


def write(output: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        output.to_csv(path, index=False)
    else:
        output.to_parquet(path, index=False)



# ---------------------------------------------------------------- profiling


def profile(config: AdvisorConfig, code: PipelineCode, files: list[Path], fmt: str) -> dict:
    """Where the transform spends its time, by the user's source line; what the data looks like."""
    options = read_options(fmt, {}, config.workload.source.read_args)
    frame = pd.concat([read_file(p, fmt, options) for p in files], ignore_index=True)
    sampler = LineSampler(threading.get_ident(), code.roots)
    with sampler:
        code.transform(frame)
    sample = frame.head(SAMPLE_ROWS)
    return {
        "hotspots": sampler.summary(),
        "environment": {
            "kind": "pipeline",
            "format": fmt,
            "rows": len(frame),
            "columns": [str(c) for c in frame.columns],
            "used_columns": used_columns(sample, code.transform),
            "category_columns": category_columns(frame),
            "missing_text_columns": [str(c) for c in text_columns(frame) if frame[c].isna().any()],
            "frame_mb": frame.memory_usage(deep=True).sum() / 2**20,
            "source_bytes": sum(f.stat().st_size for f in files),
            "row_functions": row_functions(code, frame.head(CHECK_ROWS), config.workload.float_rtol),
        },
    }


def row_functions(code: PipelineCode, sample: pd.DataFrame, rtol: float) -> list[dict]:
    """Each user function pandas calls row by row, its rewrite over columns, and whether the
    rewrite gives the row-wise values on `sample` (else the first row that differs, or the
    construct it cannot rewrite)."""
    from advisor.harness.vectorised import callbacks_vectorised, loop_verdicts

    checks = callbacks_vectorised(check=user_file(code.roots), rtol=rtol)
    try:
        with checks:
            code.transform(sample.copy())
    except Exception:  # the transform's own failure shows in the full run; what was checked stands
        pass
    return list(checks.found.values()) + loop_verdicts(code.transform, sample, rtol)


def user_file(roots: tuple[str, ...]) -> Callable[[str], bool]:
    """Whether a source file is the user's: under their code's folders, not a library's or advisor's."""
    prefixes = tuple(str(Path(r).resolve()) + os.sep for r in roots)
    return lambda file: file.startswith(prefixes) and "site-packages" not in file and "/advisor/" not in file


def used_columns(sample: pd.DataFrame, transform: Callable) -> list[str]:
    """The columns the transform reads: dropping any of them breaks or changes its output.
    Detected on a sample, column by column; a transform that reads every column keeps them all."""
    try:
        expected = comparable(checked(transform(sample.copy())))
    except Exception:
        return [str(c) for c in sample.columns]
    needed = []
    for column in sample.columns:
        try:
            output = comparable(checked(transform(sample.drop(columns=[column]))))
            same = output.equals(expected)
        except Exception:
            same = False
        if not same:
            needed.append(str(column))
    return needed


def text_columns(frame: pd.DataFrame) -> list:
    return [c for c in frame.columns if frame[c].dtype == object or pd.api.types.is_string_dtype(frame[c].dtype)]


def category_columns(frame: pd.DataFrame) -> list[str]:
    text = text_columns(frame)
    return [str(c) for c in text if frame[c].nunique(dropna=False) <= max(1, LOW_CARDINALITY * len(frame))]


class LineSampler:
    """Samples the main thread's stack every few milliseconds and charges each sample to the
    user's own source lines: `lines` by the innermost user frame (the line that caused the work,
    whatever library ran it), `inclusive` by every user line on the stack. A sample is a
    callback when a library frame sits between two user frames: a row-wise apply, or a map with
    a Python function, calling the user's code back once per row."""

    def __init__(self, thread_id: int, roots: tuple[str, ...]):
        self.thread_id, self._user_file = thread_id, user_file(roots)
        self._is_user: dict[str, bool] = {}
        self.lines: Counter = Counter()
        self.inclusive: Counter = Counter()
        self.callers: Counter = Counter()  # (outer user line, inner user line) of callbacks
        self.total = self.python = self.callbacks = 0
        self._stop = threading.Event()

    def __enter__(self):
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(PROFILE_INTERVAL_S / 2)  # let the sampler in while pandas runs Python
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        sys.setswitchinterval(self._switch)

    def _run(self) -> None:
        while not self._stop.wait(PROFILE_INTERVAL_S):
            frame = sys._current_frames().get(self.thread_id)
            if frame is not None:
                self._record(frame)

    def is_user(self, file: str) -> bool:
        if file not in self._is_user:
            self._is_user[file] = self._user_file(file)
        return self._is_user[file]

    def _record(self, frame) -> None:
        stack = []  # innermost first
        while frame is not None:
            stack.append((frame.f_code.co_filename, frame.f_lineno))
            frame = frame.f_back
        self.total += 1
        users = [i for i, (file, _) in enumerate(stack) if self.is_user(file)]
        if not users:
            return
        inner = users[0]
        self.lines[stack[inner]] += 1
        for line in {stack[i] for i in users}:
            self.inclusive[line] += 1
        outer = next((i for i in users[1:] if i > inner + 1 and not all(self.is_user(stack[j][0]) for j in range(inner, i))), None)
        if outer is not None:
            self.callbacks += 1
            self.callers[(stack[outer], stack[inner])] += 1
        if inner == 0 or outer is not None:
            self.python += 1

    def summary(self) -> dict:
        total = max(1, self.total)

        def described(file: str, line: int, count: int) -> dict:
            return {"file": file, "line": line, "share": count / total, "inclusive_share": self.inclusive[(file, line)] / total,
                    "code": source_line(file, line)}

        callbacks = [
            {"caller": described(*outer, self.inclusive[outer]), "callee": described(*inner, self.lines[inner]),
             "share": count / total}
            for (outer, inner), count in self.callers.most_common(3)
        ]
        return {"samples": self.total, "python_share": self.python / total, "callback_share": self.callbacks / total,
                "lines": [described(file, line, count) for (file, line), count in self.lines.most_common(8)],
                "callbacks": callbacks}


def source_line(file: str, line: int) -> str:
    try:
        return Path(file).read_text().splitlines()[line - 1].strip()
    except (OSError, IndexError):
        return ""


SOURCE_FORMATS = ("csv", "parquet", "jsonl")


def source_format_of(source) -> str:
    """The source's format, as declared or as its path's suffix says (csv when it cannot tell)."""
    if source.format:
        return source.format
    suffix = source.path.rsplit(".", 1)[-1].lower()
    return {"parquet": "parquet", "pq": "parquet", "jsonl": "jsonl", "json": "jsonl"}.get(suffix, "csv")
