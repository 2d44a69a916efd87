"""Nothing advisor starts outlives it, even when it is killed with SIGKILL.

Each process advisor starts asks the kernel for SIGKILL when its parent dies
(PR_SET_PDEATHSIG): the measurement child (whose parent is the fork server, which exits the
moment advisor's end of its pipe closes, the child having closed the copy multiprocessing gave
it) and each DataLoader worker advisor builds (the setting is not inherited across fork); one
whose parent died before it asked exits at once (`die_with_parent`). The
folders a run keeps its spec and logs in carry the owner's pid, so the next start removes those
whose owner is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

PR_SET_PDEATHSIG = 1
RUN_FOLDER_PREFIX = "advisor-run-"

# (the forking process's pid, the child's pid), set in each child a fork makes once this module is
# imported (multiprocessing's fork and fork server, a template's runs, DataLoader workers,
# subprocess's `preexec_fn`): the parent it was forked from, whatever `os.getppid()` says once that
# parent is gone. In a process that did not come so (a new interpreter), its own pid is not the
# one recorded, and `os.getppid()` decides.
_forked: tuple[int, int] = (0, 0)
_forking: int = 0


def _before_fork() -> None:
    global _forking
    _forking = os.getpid()


def _in_child() -> None:
    global _forked
    _forked = (_forking, os.getpid())


os.register_at_fork(before=_before_fork, after_in_child=_in_child)


def die_with_parent(*_: object) -> None:
    """Asks for SIGKILL when the parent exits; exits at once if it already has. Linux only
    (elsewhere a no-op). Its arguments are ignored, so it serves as a `worker_init_fn`. The
    parent is the one this process was forked from where a fork hook recorded it (`_forked`):
    read as `os.getppid()` here, a parent that died between the fork and this call would be init
    already, and the request, made against init, would never fire (a run forked by the fork
    server just before advisor's kill -9 lived on, waiting on its workers' pipes). A parent outside
    this process's pid namespace reads as 0 (a sandbox's first process): it cannot be compared."""
    forked_from, forked_as = _forked
    parent = os.getppid()
    if forked_as == os.getpid() and parent != 0:
        parent = forked_from
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def exit_now(code: int) -> None:
    """Ends a process whose work is done (its result out, its output flushed) without the
    interpreter's teardown: tearing torch's modules down took 0.5-0.9 s, waited on threads a job
    left running, and aborted ranks whose gloo threads were still being destroyed ("terminate
    called without an active exception", 1 run in 3 between two namespaces)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def pid_namespace() -> str:
    """The kernel's number for this process's pid namespace ("" where /proc does not say): a pid
    names a process only inside its namespace (a container has its own)."""
    try:
        return os.readlink("/proc/self/ns/pid").strip("pid:[]")  # "pid:[4026531836]"
    except OSError:
        return ""


def owned_prefix(prefix: str) -> str:
    """`prefix`, then this process's pid and pid namespace: the start of a name for a file or
    folder this process removes when done, which `remove_orphans` removes if it is killed first."""
    return f"{prefix}{os.getpid()}.{pid_namespace()}-"


def run_folder_prefix() -> str:
    return owned_prefix(RUN_FOLDER_PREFIX)


_session_folders: dict[str, str] = {}


def session_folder(name: str) -> str:
    """A folder of this process's that its runs share (`name` says what for), made once, removed
    at its exit, or by the next start's sweep where it was killed (`remove_orphaned_run_folders`)."""
    if name not in _session_folders:
        import atexit

        folder = tempfile.mkdtemp(prefix=f"{run_folder_prefix()}{name}-")
        atexit.register(shutil.rmtree, folder, True)
        _session_folders[name] = folder
    return _session_folders[name]


def remove_orphans(folder: str | os.PathLike, prefix: str) -> int:
    """Removes what processes that were killed left in `folder` under names `owned_prefix(prefix)`
    began; returns how many. Only those of this pid namespace are judged: a container sharing the
    folder has pids of its own, which mean other processes here."""
    removed = 0
    for path in glob.glob(os.path.join(glob.escape(os.fspath(folder)), f"{glob.escape(prefix)}*-*")):
        pid, _, namespace = os.path.basename(path)[len(prefix):].split("-", 1)[0].partition(".")
        if not (pid.isdigit() and namespace == pid_namespace() and not pid_alive(int(pid))):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            Path(path).unlink(missing_ok=True)
        removed += 1
    return removed


def remove_orphaned_run_folders() -> int:
    """Removes run folders left by advisor processes that were killed; returns how many."""
    return remove_orphans(tempfile.gettempdir(), RUN_FOLDER_PREFIX)


def machine() -> str:
    """This machine as others see it, for judging a pid: its hostname, its boot id and its pid
    namespace. Two machines, or two containers' hosts, can share a hostname but not a boot; two
    containers on one host can share both, but not a pid namespace, and a pid means nothing
    outside its own namespace."""
    import socket

    parts = [socket.gethostname()]
    with contextlib.suppress(OSError):
        with open("/proc/sys/kernel/random/boot_id") as handle:
            parts.append(handle.read().strip()[:8])
    return "/".join(parts + [pid_namespace()])


def owner() -> str:
    """This process as other processes and machines see it: machine:pid."""
    return f"{machine()}:{os.getpid()}"


def owner_gone(recorded: str) -> bool:
    """Whether a machine:pid recorded by `owner` names a process of this machine that no longer
    runs (another machine's processes cannot be checked from here)."""
    host, _, pid = str(recorded).rpartition(":")
    return host == machine() and pid.isdigit() and not pid_alive(int(pid))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # the ones advisor stops on, as Ctrl-C


@contextlib.contextmanager
def interrupts_held():
    """Holds Ctrl-C, SIGTERM and SIGHUP until the block is done, then acts on the first that came:
    for steps that must not be cut in two (a study's trial created but not yet named as this
    process's). Python runs signal handlers in the main thread, whichever thread the kernel
    picked, so the handlers are swapped there; elsewhere nothing is held."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    heard: list = []
    previous = {signum: signal.getsignal(signum) for signum in HELD_SIGNALS}
    for signum, handler in previous.items():
        if handler not in (signal.SIG_IGN, None):
            signal.signal(signum, lambda number, frame: heard.append((number, frame)))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)
        if heard:
            signum, frame = heard[0]
            if callable(previous[signum]):
                previous[signum](signum, frame)  # Ctrl-C raises KeyboardInterrupt here, as it would have
            else:
                os.kill(os.getpid(), signum)  # the default action, now that the block is done


SLOTS_ENV = "ADVISOR_SLOTS"  # measurements one machine runs at once, across advisor processes (unset: no limit)


@contextlib.contextmanager
def measurement_slot():
    """Holds one of the machine's `ADVISOR_SLOTS` measurement slots while a measurement runs:
    timings taken at once by several processes (workers of one study, or two sessions) distort
    each other. Each slot is a file lock, which the kernel releases when its holder dies, even
    on kill -9, so no slot is ever left taken."""
    import fcntl
    import time
    from pathlib import Path

    slots = int(os.environ.get(SLOTS_ENV) or 0)
    if slots <= 0:
        yield
        return
    folder = Path(tempfile.gettempdir()) / f"advisor-slots-{os.getuid()}"
    folder.mkdir(exist_ok=True)
    while True:
        for index in range(slots):
            handle = open(folder / f"slot-{index}.lock", "w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield
            finally:
                handle.close()  # closing releases the lock
            return
        time.sleep(0.05)


def measuring_here(owners: list[str]) -> list[str]:
    """Of the processes (machine:pid) measuring trials, those on this machine other than this one, alive."""
    here = machine()
    return [o for o in owners if o.rpartition(":")[0] == here and o != owner() and not owner_gone(o)]
