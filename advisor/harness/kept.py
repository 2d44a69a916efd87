"""Interpreters kept across verification rounds: a round's run pays a new interpreter's start
(torch's imports, the compiler stack `torch.optim` loads on first use: 3-4 s a run here) only
where it must.

Each plan (and mode) has `DRAWS` interpreters, started fresh the first time they are needed and
taken in turn, round by round: the first `DRAWS` rounds run exactly as fresh-interpreter rounds
did (every run the first in its process, its own draw of memory layout and hash seed), and each
later round runs the job again, from its builders, in the interpreter whose turn it is. The
numbers are the job's own (same seed, same steps); what a later run saves is the interpreter's
start and the first run's lazy imports. A run that fails, hangs or leaves processes behind ends
its interpreter: the next run of that plan starts a new one.

An interpreter serves one plan, so memory it keeps from an earlier run is that plan's own. It
dies with advisor (PR_SET_PDEATHSIG), like every child, and `close_all` ends them all once the
rounds are done.
"""

from __future__ import annotations

import multiprocessing
import os
import sys

from advisor.harness import templates
from advisor.harness.launch import PipedInterpreter, end_ready

DRAWS = 3  # interpreters a plan's rounds take in turn: the first look's rounds are all fresh
_kept: dict[tuple, list] = {}  # (plan key, mode) -> [its interpreters, the rounds served so far]


class KeptInterpreter(PipedInterpreter):
    """A fresh interpreter that runs measurement specs one after another, as `launch._child`
    runs one: its output to the run's log, its result to the run's file."""

    def __init__(self) -> None:
        super().__init__(_serve)

    def start(self, spec_path: str, result_path: str, log_path: str, config: bytes) -> None:
        self.connection.send((spec_path, result_path, log_path, config))

    def wait(self, timeout_s: float) -> bool:
        """Whether the run ended within `timeout_s` (its result written, or the interpreter gone)."""
        try:
            if self.connection.poll(timeout_s):
                self.connection.recv()
                return True
        except (EOFError, OSError):
            pass
        return self.process.exitcode is not None or not self.process.is_alive()


def interpreter_for(key: tuple) -> KeptInterpreter:
    """The interpreter whose turn it is for this plan and mode (a new one where it has none yet,
    or its last ended)."""
    entry = _kept.setdefault(key, [[None] * DRAWS, 0])
    interpreters, turn = entry
    place = turn % DRAWS
    entry[1] += 1
    current = interpreters[place]
    if current is None or current.exitcode is not None:
        interpreters[place] = current = KeptInterpreter()
    return current


def retire(key: tuple, interpreter: KeptInterpreter) -> None:
    """Ends an interpreter whose run failed or hung: its plan's next run starts a new one."""
    interpreter.end()
    interpreters = _kept.get(key, [[]])[0]
    for place, held in enumerate(interpreters):
        if held is interpreter:
            interpreters[place] = None


def close_all() -> None:
    """Ends every kept interpreter, every template, and those started ahead still unused (the rounds are done)."""
    for interpreters, _ in _kept.values():
        for interpreter in interpreters:
            if interpreter is not None:
                interpreter.end()
    _kept.clear()
    templates.end_all()
    end_ready()


def left_behind(pid: int) -> bool:
    """Whether a process of the interpreter's run is still alive (a DataLoader worker, a process
    the job started): then the interpreter is not reused."""
    from advisor.measure import process_tree

    return any(proc.pid != pid for proc in process_tree(pid))


def _serve(connection) -> None:
    from advisor.harness.launch import prepare_child, run_child_spec

    prepare_child()
    served = 0
    while True:
        try:
            spec_path, result_path, log_path, config = connection.recv()
        except (EOFError, OSError):
            os._exit(0)
        code = run_child_spec(spec_path, result_path, log_path, config, "kept" if served else "fresh")
        served += 1
        sys.stdout.flush()
        sys.stderr.flush()
        release_memory()
        connection.send(code)


WORKERS_EXIT_S = 2.0  # how long a finished run's DataLoader workers are given to exit


def release_memory() -> None:
    """What the run held goes back before the next: its objects (and so its DataLoader, whose
    workers are then told to exit and reaped), and a GPU's cached blocks."""
    import gc
    import time

    import psutil

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    deadline = time.monotonic() + WORKERS_EXIT_S
    while multiprocessing.active_children() or psutil.Process().children():
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
