"""How soon the quickstart gives its first verified fix, and how long its whole session takes.

    python -m experiments.first_fix [--runs 5] [--whole] [--config configs/quickstart.yaml] [--logs DIR]
                                    [--precision P]

Each run copies the config and the Python files beside it into an empty folder, as a user would,
and runs `advisor optimize` there with the defaults. It reads the session's own line "first
verified fix N s after the start" (counted from advisor's start), and the wall time of the
command from its launch (interpreter start and imports included). Without `--whole` a run is
interrupted (SIGTERM, which advisor handles as a user's Ctrl-C; SIGINT would be lost on a run
started from a background shell, which ignores it) once the first fix is said; with it, the
session runs to its end. Prints each run, then the minimum, median and maximum; `--logs` keeps
each session's output there, each line stamped with the seconds since the command's launch.
`--precision` runs the copy at that `search.precision` (0: each verification stops at its
verdict): what the rounds that pin a claim's number cost a session.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import yaml

from experiments import copied_with_its_code

ROOT = Path(__file__).resolve().parents[1]
FIRST_FIX = re.compile(r"first verified fix (\d+) s after the start: (.*)")


def one_run(config: Path, whole: bool, log: Optional[Path] = None,
            precision: Optional[float] = None) -> tuple[Optional[float], Optional[float], str]:
    """(the session's first-fix seconds, the command's wall seconds to its end or None when
    interrupted, the fix it named); the first is None where no fix was verified. `log`: where
    the session's lines go, stamped; `precision`: the copy's search.precision, where given."""
    with tempfile.TemporaryDirectory(prefix="first-fix-") as folder:
        copy = copied_with_its_code(config, Path(folder))
        if precision is not None:
            with_precision(copy, precision)
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "advisor.cli", "optimize", config.name], cwd=folder,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        first, named, said = None, "", []
        for line in process.stdout:
            said.append(f"{time.perf_counter() - started:6.1f} {line}")
            found = FIRST_FIX.search(line)
            if found and first is None:
                first, named = float(found.group(1)), found.group(2)[:70]
                if not whole:
                    os.killpg(process.pid, signal.SIGTERM)
        process.wait()
        if log is not None:
            log.write_text("".join(said))
        return first, (time.perf_counter() - started) if whole else None, named


def with_precision(config: Path, precision: float) -> None:
    """Rewrites the config at `config` with `search.precision` set to `precision`."""
    raw = yaml.safe_load(config.read_text())
    raw["search"] = {**(raw.get("search") or {}), "precision": precision}
    config.write_text(yaml.safe_dump(raw, sort_keys=False))


def spread(values: list[float]) -> str:
    if not values:
        return "none"
    return f"min {min(values):.0f} s, median {statistics.median(values):.0f} s, max {max(values):.0f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--whole", action="store_true", help="run each session to its end")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "quickstart.yaml")
    parser.add_argument("--logs", type=Path, help="keep each session's output in this folder, its lines stamped")
    parser.add_argument("--precision", type=float, help="the copy's search.precision (default: the config's own)")
    args = parser.parse_args()
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)
    firsts, wholes = [], []
    for index in range(args.runs):
        log = args.logs / f"run-{index + 1}.log" if args.logs else None
        first, whole, named = one_run(args.config.resolve(), args.whole, log, args.precision)
        print(f"run {index + 1}: first verified fix {'none' if first is None else f'{first:.0f} s'}"
              + (f", whole session {whole:.0f} s" if whole is not None else "") + (f" ({named})" if named else ""), flush=True)
        firsts += [first] if first is not None else []
        wholes += [whole] if whole is not None else []
        time.sleep(2)  # the interrupted session's processes are gone before the next one times anything
    print(f"first verified fix over {args.runs} runs: {spread(firsts)} ({args.runs - len(firsts)} without one)")
    if args.whole:
        print(f"whole session: {spread(wholes)}")


if __name__ == "__main__":
    main()
