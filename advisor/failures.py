"""How a failed run is worded, and what its words say: the reasons a child, the runner or a
kind gives a failed measurement start with these, and the session reads them back.

A leaf: it imports nothing of advisor's.
"""

from __future__ import annotations

PRUNED = "pruned"  # the reason's first word for a run stopped by its watcher
SLO_FAILURE = "over the p95 SLO"  # a service's run whose p95 broke `constraints.p95_ms`
MEMORY_FAILURES = ("over the memory budget", "out of memory", "killed by SIGKILL")


def hung(timeout_s: float) -> str:
    """A run that gave no result within its time limit, and was killed there."""
    return f"hung: no result within the {timeout_s:.0f} s time limit"


def out_of_disk(where) -> str:
    """A run whose files filled the file system they are kept on: a script's copy of the machine
    keeps every write of the run there too."""
    return (f"out of disk: the run's files, and a script's every write, are kept under {where}, whose file system "
            "is full; free room there, or set TMPDIR to a folder with room")


def pruned(run) -> bool:
    """Whether a run was stopped midway, clearly losing."""
    return not run.ok and run.reason.startswith(PRUNED)


def out_of_memory(run) -> bool:
    """Whether a run failed for want of memory (at the budget, an allocation, or the OOM killer)."""
    return not run.ok and run.reason.startswith(MEMORY_FAILURES)


def over_slo(run) -> bool:
    """Whether a service's run broke its p95 SLO."""
    return not run.ok and run.reason.startswith(SLO_FAILURE)


def broke_memory_budget(run, max_memory_mb) -> bool:
    """Whether a run did not fit advisor's memory budget: killed for want of memory, or finished
    over it (a peak read after the run)."""
    return out_of_memory(run) or (max_memory_mb is not None and run.ok and run.peak_memory_mb > max_memory_mb)


def broken_constraint(run, max_memory_mb) -> str | None:
    """The constraint a run failed for, in words: advisor's memory budget, or a service's SLO."""
    if out_of_memory(run) and max_memory_mb is not None:
        return "the memory budget"
    if over_slo(run):
        return "the p95 SLO"
    return None
