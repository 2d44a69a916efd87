"""Starts measurement children quickly: each is forked from a template process that has only
imported torch and advisor's harness (multiprocessing's forkserver), so a run does not pay the
~1.5 s of imports, yet still starts fresh: no run ever executes in a process that ran another.
"""

from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import sys
import time
from multiprocessing import resource_tracker
from multiprocessing.context import BaseContext
from typing import Callable, Optional

UNIX_PATH_MAX = 100  # a Unix socket's path, less a margin (the kernel's limit is 108 bytes with its terminator)
PRELOAD = ["advisor.harness.train"]  # torch and the recipes (a kind adds its own: `Kind.preload`)

_context: Optional[BaseContext] = None
_preload = list(PRELOAD)  # what the fork server imports: a new interpreter started ahead imports the same
_warming = None  # the thread starting the fork server (`warm_up`)


def context() -> BaseContext:
    global _context
    if _context is None:
        own_temp_dir()
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(_preload)
    return _context


def own_temp_dir() -> None:
    """multiprocessing keeps the fork server's socket in a `pymp-*` folder it removes at a clean
    exit only; after kill -9 nothing would. Inside a run folder of this process it goes with the
    next start's sweep of folders whose process is gone (`lifetime.remove_orphaned_run_folders`)."""
    import atexit
    import shutil
    import tempfile
    from multiprocessing import process

    from advisor.harness.lifetime import run_folder_prefix

    config = getattr(process.current_process(), "_config", None)  # where multiprocessing.util looks first
    prefix = os.path.join(tempfile.gettempdir(), run_folder_prefix())
    if config is None or config.get("tempdir") or len(prefix) + len("XXXXXXXX/listener-XXXXXXXX") > UNIX_PATH_MAX:
        return  # a socket's path has a limit: under a long temp folder, multiprocessing's own place
    folder = tempfile.mkdtemp(prefix=run_folder_prefix())
    config["tempdir"] = folder
    atexit.register(shutil.rmtree, folder, True)


def warm_up(preload: tuple[str, ...] = ()) -> None:
    """Starts the fork server (its imports take seconds) in the background, while the caller
    does its own start-up work (reading the config, MLflow, Optuna). `preload`: what the job's
    children import besides torch (a Lightning job's `lightning`, 4-5 s a child on 2 cores),
    imported once there; a server already running keeps what it has."""
    import threading
    from multiprocessing import forkserver

    global _warming
    use_preload(preload)
    context()
    _warming = threading.Thread(target=forkserver.ensure_running, daemon=True)
    _warming.start()


def use_preload(preload: tuple[str, ...] = ()) -> None:
    """What the fork server and the interpreters started ahead import from here on (`preloaded`);
    once the fork server's context exists, it keeps what it has."""
    global _preload
    if _context is None:
        _preload = preloaded(preload)


def preloaded(preload: tuple[str, ...] = ()) -> list[str]:
    """What the fork server and each interpreter started ahead import for a kind: torch and the
    harness, then the kind's own `preload`."""
    return PRELOAD + list(preload)


def stop() -> None:
    """Ends what multiprocessing started for this process, at every exit (atexit): the fork server
    and the resource tracker. Left to notice the exit themselves, they live on after advisor has
    ended (the fork server until it has imported torch, then tearing its modules down for a second
    or more), both holding advisor's output open to whoever reads it (a pipe, a test)."""
    end_ready()
    stop_fork_server()
    stop_resource_tracker()


def stop_fork_server() -> None:
    import signal
    from multiprocessing import forkserver

    if _warming is not None:
        _warming.join(timeout=10)  # its pid is known once it is started: a moment, not its imports
    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if not pid:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:  # reaped and forgotten (a later run starts a new one), so a second stop kills no reused pid
        server._stop()
    except (AttributeError, OSError):
        server._forkserver_pid = None


def stop_resource_tracker(wait_s: float = 2.0) -> None:
    """Closes this process's end of the tracker's pipe, on which it ends (after unlinking what
    its clients left), and waits up to `wait_s` for it: longer only if a child still holds the
    pipe, which its own end will close. Not killed: it may still be unlinking shared memory."""
    tracker = resource_tracker._resource_tracker
    fd, pid = getattr(tracker, "_fd", None), getattr(tracker, "_pid", None)
    if fd is None or pid is None:
        return  # none started, or a parent's
    tracker._fd = tracker._pid = None
    os.close(fd)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.01)


atexit.register(stop)


def start(spec_path: str, result_path: str, log_path: str, config: bytes,
          fresh: bool = False, ahead: bool = False, sandboxed: bool = False) -> multiprocessing.Process:
    """Starts a child that runs the spec; it leads its own process group (so a kill takes its
    DataLoader workers too) and writes its output to `log_path`. `fresh` starts a new interpreter
    instead (pipelines: memory budgets are judged on RSS, which torch's preloaded pages would fill);
    with `ahead`, one started ahead of its run (`ready_interpreter`; `sandboxed`: a script's,
    already in the namespaces of its copy of the machine).
    `config`: the config pickled by value, handed over with the child's start, not through a file."""
    args = (spec_path, result_path, log_path, config)
    taken = handed_ahead(args, sandboxed) if fresh and ahead else None
    if taken is not None:
        return taken
    chosen = multiprocessing.get_context("spawn") if fresh else context()
    process = chosen.Process(target=_child, args=args, daemon=False)
    process.start()
    return process


READY_MOST = 4  # the most new interpreters started at once: their imports take a core each
READY_WAIT_S = 120.0  # how long a batch's imports may take before its laggards are ended
_ready: list["ReadyInterpreter"] = []  # started ahead, their imports done, each waiting for its one run


class PipedInterpreter:
    """A new interpreter that runs `target(its end of a pipe, *args)`: its runs reach it through
    the pipe. It ends with `end`, at the latest with advisor (PR_SET_PDEATHSIG)."""

    def __init__(self, target: Callable, *args: object) -> None:
        chosen = multiprocessing.get_context("spawn")
        self.connection, their_end = chosen.Pipe()
        self.process = chosen.Process(target=target, args=(their_end, *args), daemon=False)
        self.process.start()
        their_end.close()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def exitcode(self) -> Optional[int]:
        return self.process.exitcode

    def end(self) -> None:
        from advisor.measure import kill_tree

        kill_tree(self.process.pid)
        self.process.join()
        self.connection.close()


class ReadyInterpreter(PipedInterpreter):
    """A new interpreter that imports what the fork server would (torch, the compiler stack
    `torch.optim` loads on first use, a kind's own), says so, and then runs one spec, as a new
    interpreter started for it would: the first run in its process, its own draw of memory
    layout and hash seed. `sandboxed`: for a script's run, it enters the namespaces of a copy of
    the machine first (while it has one thread) and waits as their pid 1; the copy itself is
    built when the run's folder is known."""

    def __init__(self, sandboxed: bool = False, target: Optional[Callable] = None) -> None:
        super().__init__(target or _ready_child, list(_preload), sandboxed)
        self.sandboxed = sandboxed

    def wait_ready(self, timeout_s: float) -> bool:
        try:
            return self.connection.poll(timeout_s) and self.connection.recv() == READY
        except (EOFError, OSError):
            return False


READY = "ready"


def ready_interpreter(sandboxed: bool = False) -> Optional[ReadyInterpreter]:
    """A new interpreter with its imports done, waiting for its run; None where none could start.
    Where none waits, a batch starts at once, one a core (their imports run side by side, where
    a run's own start would import alone: 3 s a run here, while advisor waits), and all of it
    has imported before any runs: a run's window never shares the machine with an import."""
    while (interpreter := _waiting(sandboxed)) is not None:
        if interpreter.exitcode is None:
            return interpreter
        interpreter.end()
    batch = [ReadyInterpreter(sandboxed) for _ in range(min(READY_MOST, len(os.sched_getaffinity(0))))]
    _ready.extend(batch)  # held from their start: an interrupt while they import still ends them (`end_ready`)
    for interpreter in batch:
        if not interpreter.wait_ready(READY_WAIT_S):
            _ready.remove(interpreter)
            interpreter.end()
    return _waiting(sandboxed)


def _waiting(sandboxed: bool) -> Optional[ReadyInterpreter]:
    """The interpreter started ahead that is taken next (the last started) for such a run, out of the list."""
    for index in range(len(_ready) - 1, -1, -1):
        if _ready[index].sandboxed == sandboxed:
            return _ready.pop(index)
    return None


def handed_ahead(args: tuple, sandboxed: bool = False) -> Optional[multiprocessing.Process]:
    """The run handed to an interpreter started ahead; None where none could take it."""
    while (ready := ready_interpreter(sandboxed)) is not None:
        try:
            ready.connection.send(args)
        except OSError:  # it died while it waited
            ready.end()
            continue
        ready.connection.close()
        return ready.process
    return None


def end_ready() -> None:
    """Ends the interpreters still waiting for a run (the rounds that wanted them are done)."""
    while _ready:
        _ready.pop().end()


def _ready_child(connection, modules: list[str], sandboxed: bool) -> None:
    import importlib

    prepare_child()
    if sandboxed:
        from advisor.harness.sandbox import become_pid_one, enter_namespaces

        try:
            enter_namespaces()
        except OSError:
            os._exit(1)  # never ready: the run starts an interpreter of its own, which says why
        become_pid_one()
    for name in modules:
        importlib.import_module(name)
    connection.send(READY)
    try:
        args = connection.recv()
    except (EOFError, OSError):  # ended unused
        os._exit(0)
    connection.close()
    run_then_exit(*args, entered=sandboxed)


def _child(spec_path: str, result_path: str, log_path: str, config: bytes) -> None:
    prepare_child()
    run_then_exit(spec_path, result_path, log_path, config)


def run_then_exit(spec_path: str, result_path: str, log_path: str, config: bytes, entered: bool = False,
                   interpreter: Optional[str] = None) -> None:
    """`entered`: this process is pid 1 of its copy's namespaces already (started ahead for a script).
    `interpreter`: how this process started, where the parent's pid cannot tell (`Measurement.interpreter`)."""
    from advisor.harness.lifetime import exit_now

    if interpreter is None:
        with open(spec_path) as handle:
            observer = json.load(handle).get("observer")
        # a new interpreter is the observer's own child (or, `entered`, its child's); a fork is the template process's
        interpreter = "fresh" if entered or os.getppid() == observer else "forked"
    code = run_child_spec(spec_path, result_path, log_path, config, interpreter, entered)
    # The result is written: the run ends here (what the job left running, the parent kills with
    # the tree; a sandboxed run's pid 1 ends the script's threads and processes so).
    exit_now(code or 0)


def prepare_child() -> None:
    """What a measurement process does first: die with advisor, lead its own process group (so
    a kill takes its DataLoader workers too), and behave as a plain `python` process would:
    DataLoader workers start by the platform's default method (fork on Linux before 3.14), not
    by the forkserver this child may have come from; semaphores of workers killed at the end
    are this process's tracker's to clean up."""
    from advisor.harness.lifetime import die_with_parent

    die_with_parent()
    let_the_fork_server_end()
    os.setsid()
    multiprocessing.set_start_method(multiprocessing.get_all_start_methods()[0], force=True)
    resource_tracker._resource_tracker = resource_tracker.ResourceTracker()


def let_the_fork_server_end() -> None:
    """Closes what a child forked by the fork server holds of advisor's pipe to it. multiprocessing
    hands each such child the pipe's writing end (so it could fork through the server too), and the
    server runs on while any holder lives: after advisor's kill -9 the server would wait on the
    child, and the child, dying only with the server (`die_with_parent`), on the server. Closed, the
    server ends with advisor and the child with the server. A new interpreter holds none."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is None or getattr(server, "_forkserver_pid", None):
        return  # none held, or this process started the server: its end is the one that must stay
    server._forkserver_alive_fd = None
    try:
        os.close(fd)
    except OSError:
        pass


def compile_cache_kept(folder: Optional[str]) -> dict[str, str]:
    """Where torch.compile keeps its cache (the temp folder's `torchinductor_<user>`, and
    `TORCHINDUCTOR_CACHE_DIR` where the user set one), each with the folder of the session's cache
    that keeps a script's writes there across its runs (`sandbox.kept_across_runs`): what one run
    compiled, its precompiled headers too, the next finds; the machine's own cache is read beneath."""
    if not folder:
        return {}
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        return {}
    default = os.path.abspath(default_cache_dir())
    places = sorted({default, os.path.abspath(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default)})
    return {place: os.path.join(folder, str(index)) for index, place in enumerate(places)}


def run_child_spec(spec_path: str, result_path: str, log_path: str, config: bytes, interpreter: str,
                   entered: bool = False) -> Optional[int]:
    """Runs one spec in this process, its output to `log_path`; returns the exit status a
    sandboxed run must end its process with, None otherwise. `entered`: already pid 1 of the
    namespaces of a copy of the machine, which is built here."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    from advisor.harness.child import main
    from advisor.measure import limit_data_segment, watched_by

    with open(spec_path) as handle:
        spec = json.load(handle)
    watched_by(spec.get("observer"))
    if spec.get("cgroup"):  # before anything runs: every page the child touches is charged there
        from advisor.harness.cgroups import join

        join(spec["cgroup"])
    sandboxed = bool(spec.get("sandbox"))
    if sandboxed:  # from here on, a copy of the machine (`advisor.harness.sandbox`)
        from advisor.harness.sandbox import enter, move_into_copy

        (move_into_copy if entered else enter)(spec["scratch"], lambda: compile_cache_kept(spec.get("compile_cache")))
    elif spec.get("compile_cache"):  # without a copy, torch is told where (read when the script first compiles)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = spec["compile_cache"]
    limit_data_segment(spec["memory_limit_mb"])
    code = main(spec_path, result_path, interpreter, config)
    if sandboxed:
        sys.stdout.flush()
        sys.stderr.flush()
        return code
    return None
