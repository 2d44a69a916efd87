"""A memory cgroup per measurement child, where the host delegates a cgroup v2 subtree to advisor.

systemd delegates a subtree on request (`systemd-run --user --scope -p Delegate=yes advisor ...`)
and marks it with the `trusted.delegate` (or `user.delegate`) extended attribute. There each
child runs in a cgroup of its own: `memory.max` is the budget (the kernel reclaims, then kills
inside that cgroup alone, never the parent) and `memory.peak` the reading, as the kernel
accounts it. Anywhere else nothing is created or changed: the cgroup hierarchy belongs to the
host's services, and advisor falls back to PSS and high-water marks (`advisor.measure`).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Optional

MB = 1024 * 1024
METHOD = "the child's own cgroup (memory.peak, memory.max at the budget)"
SELF_LEAF = "advisor-self"  # where advisor's own processes move: a cgroup that gives its children controllers holds none

_counter = itertools.count()
_prepared: dict[str, Optional[Path]] = {}


def delegated_root(proc_cgroup: Path = Path("/proc/self/cgroup"), mount: Path = Path("/sys/fs/cgroup")) -> Optional[Path]:
    """This process's cgroup when it is a delegated cgroup v2 subtree with the memory controller,
    else None (cgroup v1 or hybrid hosts, undelegated groups, `ADVISOR_CGROUPS=off`)."""
    if os.environ.get("ADVISOR_CGROUPS") == "off":
        return None
    try:
        lines = proc_cgroup.read_text().split()
    except OSError:
        return None
    if len(lines) != 1 or not lines[0].startswith("0::"):
        return None  # v1 hierarchies present: the memory controller is not v2's to use
    here = mount / lines[0][3:].lstrip("/")
    try:
        controllers = (here / "cgroup.controllers").read_text().split()
    except OSError:
        return None
    if "memory" not in controllers or not _delegated(here) or not os.access(here, os.W_OK):
        return None
    return here


def _delegated(path: Path) -> bool:
    for name in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(path, name).strip() == b"1":
                return True
        except OSError:
            pass
    return False


def prepared_root() -> Optional[Path]:
    """The delegated subtree, ready for per-child groups (once per process): advisor's own
    processes move to a leaf, and memory is enabled for the children. None where there is no
    delegated subtree, or the kernel refuses (then nothing else is tried)."""
    if "root" in _prepared:
        return _prepared["root"]
    root = delegated_root()
    if root is not None:
        try:
            leaf = root / SELF_LEAF
            leaf.mkdir(exist_ok=True)
            for pid in (root / "cgroup.procs").read_text().split():
                (leaf / "cgroup.procs").write_text(pid)
            (root / "cgroup.subtree_control").write_text("+memory")
        except OSError:
            root = None
    _prepared["root"] = root
    return root


def child_group(budget_mb: float) -> Optional[Path]:
    """A fresh cgroup with `memory.max` at the budget (no swap to hide in), or None."""
    root = prepared_root()
    if root is None:
        return None
    path = root / f"advisor-run-{os.getpid()}-{next(_counter)}"
    try:
        path.mkdir()
        (path / "memory.max").write_text(str(int(budget_mb * MB)))
        if (path / "memory.swap.max").exists():
            (path / "memory.swap.max").write_text("0")
    except OSError:
        remove(path)
        return None
    return path


def join(path: str) -> None:
    """Moves the calling process (a child, before it runs anything) into its group."""
    Path(path, "cgroup.procs").write_text(str(os.getpid()))


def reading(path: Path) -> tuple[float, bool]:
    """The group's peak memory in MB (as the kernel charged it), and whether the kernel killed
    inside it at `memory.max`."""
    try:
        peak = int((path / "memory.peak").read_text()) / MB
    except (OSError, ValueError):
        peak = 0.0
    try:
        events = dict(line.split() for line in (path / "memory.events").read_text().splitlines())
        killed = int(events.get("oom_kill", 0)) > 0
    except (OSError, ValueError):
        killed = False
    return peak, killed


def remove(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
