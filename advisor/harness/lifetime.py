"""Nothing advisor starts outlives it, even when it is killed with SIGKILL.

Each process advisor starts asks the kernel for SIGKILL when its parent dies
(PR_SET_PDEATHSIG): the measurement child (whose parent is the fork server, which exits the
moment advisor's end of its pipe closes) and each DataLoader worker advisor builds (the setting
is not inherited across fork). The folders a run keeps its spec and logs in carry the owner's
pid, so the next start removes those whose owner is gone.
"""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import signal
import tempfile

PR_SET_PDEATHSIG = 1
RUN_FOLDER_PREFIX = "advisor-run-"


def die_with_parent(*_: object) -> None:
    """Asks for SIGKILL when the parent exits; exits at once if it already has. Linux only
    (elsewhere a no-op). Its arguments are ignored, so it serves as a `worker_init_fn`."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def run_folder_prefix() -> str:
    return f"{RUN_FOLDER_PREFIX}{os.getpid()}-"


def remove_orphaned_run_folders() -> int:
    """Removes run folders left by advisor processes that were killed; returns how many."""
    removed = 0
    for path in glob.glob(os.path.join(tempfile.gettempdir(), f"{RUN_FOLDER_PREFIX}*-*")):
        owner = os.path.basename(path)[len(RUN_FOLDER_PREFIX):].split("-", 1)[0]
        if owner.isdigit() and not pid_alive(int(owner)):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def owner() -> str:
    """This process as other processes and machines see it: host:pid."""
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def owner_gone(recorded: str) -> bool:
    """Whether a host:pid recorded by `owner` names a process of this host that no longer runs
    (another host's processes cannot be checked from here)."""
    import socket

    host, _, pid = str(recorded).rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not pid_alive(int(pid))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
