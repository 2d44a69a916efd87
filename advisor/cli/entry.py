"""The `advisor` command's entry: the arguments read, the process readied (signals, slots, the
fork server warming), the command run, and its errors and Ctrl-C turned into exit statuses."""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from advisor.cli.arguments import config_argument, config_of, split_script_command
from advisor.cli.commands import run_diagnose, run_optimize, run_retune, run_worker
from advisor.cli.parser import build_parser
from advisor.errors import UserError


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    argv, script_command = split_script_command(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.name in ("recipes", "schema"):  # about advisor itself: no config, nothing measured
        return args.command(args)
    from advisor.workload import write_no_bytecode

    write_no_bytecode()  # before any of the user's modules is imported
    try:
        args.config, args.shown = config_argument(args, script_command)
    except UserError as exc:
        print(f"advisor: error: {exc}", file=sys.stderr)
        return 2
    if sys.platform != "linux":
        print(f"advisor: error: advisor runs on Linux only (it relies on the forkserver, process groups and /proc), "
              f"and this is {sys.platform}: run it on a Linux machine, a Linux container or WSL", file=sys.stderr)
        return 2
    if getattr(args, "slots", None) is not None:
        if args.slots < 1:
            print("advisor: error: --slots: expected a number of measurements at once >= 1, got "
                  f"{args.slots}", file=sys.stderr)
            return 2
        import os

        from advisor.harness.lifetime import SLOTS_ENV

        os.environ[SLOTS_ENV] = str(args.slots)  # read by every measurement, in this process and its children
    if getattr(args, "unsandboxed", False):
        import os

        from advisor.harness.runner import UNSANDBOXED

        os.environ[UNSANDBOXED] = "1"  # read by every measurement of a script
    stop_on_signals()
    from advisor.harness.lifetime import remove_orphaned_run_folders

    remove_orphaned_run_folders()
    warm_up_for(args)
    from advisor.harness import launch

    try:
        return args.command(args)
    except UserError as exc:
        launch.stop()
        print(f"advisor: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted(launch)
    except Exception as exc:
        if not raised_by_interrupt(exc):
            raise
        return interrupted(launch)


def interrupted(launch) -> int:
    """Ctrl-C (or SIGTERM, SIGHUP): the running measurement stopped, finished trials kept."""
    launch.stop()
    print("advisor: interrupted; finished trials are kept: run the same command again to resume", file=sys.stderr)
    return 130


def raised_by_interrupt(exc: BaseException) -> bool:
    """Whether an error was raised while Ctrl-C was being handled: a library's cleanup that fails
    under the interrupt (Optuna's journal lock, unlinking a file the interrupted call had already
    removed) is the interrupt, not a crash."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP (a closed SSH session) stop advisor as Ctrl-C does: the running
    measurement is killed with its workers, finished trials are kept, the study can resume."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)


def warm_up_for(args: argparse.Namespace) -> None:
    """Training runs start from a fork server that preloads torch: start it now, beside the
    command's own start-up (`advisor.api.warm_up_fork_server`)."""
    if args.command not in (run_diagnose, run_optimize, run_worker, run_retune):
        return
    from advisor.api import warm_up_fork_server
    from advisor.errors import UserError

    try:
        warm_up_fork_server(config_of(args))
    except UserError:
        pass  # the command reports it


def run() -> None:
    """The `advisor` command: main, then a quick exit. Cleanup registered with atexit runs (it
    reaps children and removes temporary folders); tearing down the imported modules of torch,
    MLflow and SQLAlchemy one by one does not: it took 2-3 s after every command, with nothing
    left to write."""
    import atexit
    import os

    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(code)
