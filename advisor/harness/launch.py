"""Starts measurement children quickly: each is forked from a template process that has only
imported torch and advisor's harness (multiprocessing's forkserver), so a run does not pay the
~1.5 s of imports, yet still starts fresh: no run ever executes in a process that ran another.
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing import resource_tracker
import sys
from multiprocessing.context import BaseContext
from typing import Optional

PRELOAD = ["advisor.harness.train", "torch._dynamo"]  # torch and the recipes; torch.optim imports dynamo on first use (~1 s)

_context: Optional[BaseContext] = None


def context() -> BaseContext:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def warm_up() -> None:
    """Starts the fork server (its imports take seconds) in the background, while the caller
    does its own start-up work (reading the config, MLflow, Optuna)."""
    import threading
    from multiprocessing import forkserver

    context()
    threading.Thread(target=forkserver.ensure_running, daemon=True).start()


def start(spec_path: str, result_path: str, log_path: str, fresh: bool = False) -> multiprocessing.Process:
    """Starts a child that runs the spec; it leads its own process group (so a kill takes its
    DataLoader workers too) and writes its output to `log_path`. `fresh` starts a new interpreter
    instead (pipelines: memory budgets are judged on RSS, which torch's preloaded pages would fill)."""
    chosen = multiprocessing.get_context("spawn") if fresh else context()
    process = chosen.Process(target=_child, args=(spec_path, result_path, log_path), daemon=False)
    process.start()
    return process


def _child(spec_path: str, result_path: str, log_path: str) -> None:
    from advisor.harness.lifetime import die_with_parent

    die_with_parent()
    os.setsid()
    # Behave as a plain `python` process would: DataLoader workers start by the platform's default
    # method (fork on Linux before 3.14), not by the forkserver this child came from; and
    # semaphores of workers killed at the end are this child's tracker's to clean up.
    multiprocessing.set_start_method(multiprocessing.get_all_start_methods()[0], force=True)
    resource_tracker._resource_tracker = resource_tracker.ResourceTracker()
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    import json

    from advisor.harness.child import main
    from advisor.measure import limit_data_segment, watched_by

    with open(spec_path) as handle:
        spec = json.load(handle)
    watched_by(spec.get("observer"))
    if spec.get("cgroup"):  # before anything runs: every page the child touches is charged there
        from advisor.harness.cgroups import join

        join(spec["cgroup"])
    limit_data_segment(spec["memory_limit_mb"])
    main(spec_path, result_path)
