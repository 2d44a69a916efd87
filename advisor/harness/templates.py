"""Verification rounds forked from templates of their own: a new interpreter imports what the
fork server would (torch, the compiler stack `torch.optim` loads on first use, a kind's own
modules), then forks a child for each run of one round, and ends with the round.

Every run is still the first in its process, and each round draws its memory layout and hash
seed anew, as runs in new interpreters do; but a round pays one interpreter's imports, not one a
run. Two templates import side by side in the time of one on a 2-core machine, so they start a
pair at once (`launch.READY_MOST`, one a core), each serving a round: a round's imports cost half
what a new interpreter for each of its two runs cost (`python -m experiments.kept_rounds --ways
ahead,template`).

The session's own fork server (where trials come from) would give every round one draw, and a
job's speed can hang on that draw (`experiments.layout`): here a template serves one round. Its
runs share its draw, so a round's ratio compares plans on one layout, and the rounds are
independent draws, as the interval assumes. A template never runs a plan twice: a plan seen again
starts the next round's template. A script's runs keep a new interpreter each (it enters its own
copy of the machine first); a run held to a cgroup or watched as it goes starts its own.
"""

from __future__ import annotations

import atexit
import os
import signal
from typing import Optional

from advisor.harness.launch import READY, READY_MOST, READY_WAIT_S, ReadyInterpreter, prepare_child, run_then_exit
from advisor.measure import status_mb

FORK_FAILED = "fork failed"  # the template's answer where it could not fork the run


class Template(ReadyInterpreter):
    """A new interpreter that has imported what a run needs and forks one child per run it is
    handed (`fork`), reaping each and passing on its exit status, until it is ended."""

    def __init__(self) -> None:
        super().__init__(target=_serve_runs)
        self.served: set = set()  # the keys of the plans it ran

    def fork(self, args: tuple) -> Optional["TemplateRun"]:
        """The run of `args` (`launch.start`'s) forked here; None where the template is gone or could not fork."""
        try:
            self.connection.send(args)
            forked = self.connection.recv()
        except (EOFError, OSError):
            return None
        return TemplateRun(self, *forked) if isinstance(forked, tuple) else None


class TemplateRun:
    """A run forked by a template, as the runner sees a child process: its pid, and its exit
    status once the template has reaped it (`join`)."""

    def __init__(self, template: Template, pid: int, template_mb: float) -> None:
        self.template, self.pid = template, pid
        self.template_mb = template_mb  # the library pages the template maps and the run does not (`runner.with_template_pages`)
        self.exitcode: Optional[int] = None

    def join(self, timeout: Optional[float] = None) -> None:
        if self.exitcode is not None:
            return
        try:
            if self.template.connection.poll(timeout):
                self.exitcode = self.template.connection.recv()
        except (EOFError, OSError):  # the template died, and its run with it (PR_SET_PDEATHSIG)
            self.exitcode = -signal.SIGKILL

    def is_alive(self) -> bool:
        self.join(0)
        return self.exitcode is None


_waiting: list[Template] = []  # started, their imports done, each waiting for its round
_serving: list[Template] = []  # the template of the round in progress (none, or one)


def start(args: tuple, key: str) -> Optional[TemplateRun]:
    """The run of `args`, forked by the template of the round in progress, or by the next
    round's where that one ran `key`'s plan already; None where no template could take it (the
    caller starts a new interpreter instead)."""
    for _ in range(READY_MOST + 1):
        template = _serving[0] if _serving else None
        if template is None or key in template.served or template.exitcode is not None:
            end_round()
            template = _next_template()
            if template is None:
                return None
            _serving.append(template)
        run = template.fork(args)
        if run is not None:
            template.served.add(key)
            return run
        end_round()
    return None


def end_round() -> None:
    """Ends the template of the round in progress: the next run takes a new one."""
    while _serving:
        _serving.pop().end()


def end_all() -> None:
    """Ends every template, serving or waiting (the rounds are done, or advisor is)."""
    end_round()
    while _waiting:
        _waiting.pop().end()


atexit.register(end_all)  # before multiprocessing's own exit handler, which would wait on them


def _next_template() -> Optional[Template]:
    """A template with its imports done: one started with the last batch, or the first of a new
    batch, one a core, whose imports all end before any run begins (`launch.ready_interpreter`)."""
    while _waiting:
        template = _waiting.pop(0)
        if template.exitcode is None:
            return template
        template.end()
    batch = [Template() for _ in range(min(READY_MOST, len(os.sched_getaffinity(0))))]
    _waiting.extend(batch)  # held from their start: an interrupt while they import still ends them
    for template in batch:
        if not template.wait_ready(READY_WAIT_S):
            _waiting.remove(template)
            template.end()
    return _waiting.pop(0) if _waiting else None


def _serve_runs(connection, modules: list[str], sandboxed: bool = False) -> None:
    """The template's side: imports, says so, then forks each run it is handed, sends its pid (and
    its own file pages, `file_pages_mb`), and its exit status once it has ended; ends when advisor
    closes the pipe (or dies)."""
    import importlib

    prepare_child()
    for name in modules:
        importlib.import_module(name)
    connection.send(READY)
    while True:
        try:
            args = connection.recv()
        except (EOFError, OSError):
            os._exit(0)
        try:
            pid = os.fork()
        except OSError:
            connection.send(FORK_FAILED)
            continue
        if pid == 0:
            connection.close()  # the run's copy: only the template answers advisor
            prepare_child()
            run_then_exit(*args, interpreter="template")
        connection.send((pid, file_pages_mb()))
        connection.send(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))


def file_pages_mb() -> float:
    """This process's resident pages of files (torch's libraries, touched by its imports), in MB: a
    child forked from it does not map them until it touches them itself."""
    return status_mb(os.getpid(), ("RssFile",)).get("RssFile", 0.0)
