"""The command line: every command, its options, its examples and its exit statuses."""

from __future__ import annotations

import argparse
import functools
from typing import Any, Callable

from advisor.cli.arguments import SCRIPT_COMMANDS
from advisor.cli.commands import run_diagnose, run_optimize, run_recipes, run_report, run_retune, run_schema, run_ui, run_worker
from advisor.cli.schedule import run_schedule


def positive(kind: type) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` above zero."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number above 0")
        return value

    return parse


EXIT_STATUSES = {  # by command: what each exit status means
    "diagnose": ("0 measured and diagnosed", "2 bad input (one line: the problem and the fix)",
                 "4 the job itself crashed or hung as it is", "130 interrupted"),
    "optimize": ("0 a session finished (verified fixes or not)", "2 bad input (one line: the problem and the fix)",
                 "4 the job itself crashed or hung as it is", "130 interrupted: finished trials are kept, run it again to resume"),
    "retune": ("0 the advice holds, or was tuned again", "2 bad input", "3 the advice no longer holds (regressed)",
               "130 interrupted"),
    "report": ("0 printed", "2 no store or no session yet", "4 the latest session's baseline failed"),
}


EXAMPLES = {
    "diagnose": ("advisor diagnose -- python train.py --epochs 5", "advisor diagnose configs/quickstart.yaml --json > diagnosis.json"),
    "optimize": ("advisor optimize -- python train.py --epochs 5",
                 "advisor optimize configs/serve_encoder.yaml --trials 12 --time-budget 300",
                 "advisor optimize job.yaml --evidence diagnosis.json --json -q > ranking.json"),
    "worker": ("advisor worker job.yaml   # beside a running optimize of the same study",),
    "report": ("advisor report job.yaml", "advisor report job.yaml --html", "advisor report job.yaml --json --run RUN_ID"),
    "retune": ("advisor retune job.yaml", "advisor retune job.yaml --json -q > retune.json"),
    "schedule": ("advisor schedule job.yaml --install --cron '0 3 * * *'",),
    "ui": ("advisor ui job.yaml --port 5001",),
}


def epilog(name: str) -> str:
    """A command's examples and exit statuses, below its options in --help."""
    lines = ["examples:", *(f"  {example}" for example in EXAMPLES.get(name, ()))] if name in EXAMPLES else []
    statuses = EXIT_STATUSES.get(name, ("0 done", "2 bad input (one line: the problem and the fix)"))
    return "\n".join([*lines, "", "exit status:", *(f"  {status}" for status in statuses)]).strip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="advisor",
        description="Measures a PyTorch training job or inference service, or a pandas pipeline, names its bottleneck "
        "with evidence, trials the matching fixes and keeps only those whose speedup is verified and whose results "
        "are unchanged.",
        epilog="examples:\n  advisor optimize -- python train.py           # your script as it is\n"
               "  advisor optimize configs/serve_encoder.yaml   # a service, judged on its p95 under load\n"
               "  advisor recipes                               # every fix advisor can try\n\n"
               "advisor COMMAND --help shows each command's options, examples and exit statuses.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"advisor {version()}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    command = functools.partial(add_command, commands)
    add_measuring_commands(command)
    add_review_commands(command)
    add_about_commands(commands)
    return parser


def add_command(commands, name: str, handler, help_text: str, config_help: str = "path of the YAML config"):
    """A command that reads a config (or a script's command line), with the options every such command has."""
    sub = commands.add_parser(name, help=help_text, description=help_text, epilog=epilog(name),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub.add_argument("config", nargs="?", help=config_help + (
        "; or, after --, the command line of a training script (-- python train.py ARGS)"
        if name in SCRIPT_COMMANDS else ""))
    sub.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr (for CI logs)")
    sub.add_argument("-v", "--verbose", action="store_true", help="the detail the default output leaves out "
                                                                 "(every rejected plan)")
    sub.set_defaults(command=handler, name=name)
    return sub


def add_measuring_commands(command) -> None:
    """diagnose, optimize and worker: the commands that measure the job."""
    diagnose = command("diagnose", run_diagnose, "measure the job and name its bottleneck with evidence")
    diagnose.add_argument("--json", action="store_true", help="print the result as JSON on stdout")

    optimize = command("optimize", run_optimize, "diagnose, trial the matching fixes, verify and rank them")
    optimize.add_argument("--fresh", action="store_true", help="discard the workload's earlier study and start anew")
    optimize.add_argument("--results", help="folder for the results (default: advisor-results/ next to the config)")
    optimize.add_argument("--evidence", help="reuse a diagnosis saved by `advisor diagnose --json` instead of measuring again")
    optimize.add_argument("--json", action="store_true", help="print the ranked recommendations as JSON on stdout")

    worker = command("worker", run_worker, "join the workload's study from another process or machine",
                     "path of the YAML config (search.storage names the shared study)")
    worker.add_argument("--wait-s", type=float, default=600.0, metavar="S",
                        help="wait up to S seconds for the study to exist (default 600: an optimize started beside "
                             "it diagnoses first)")
    for sub in (optimize, worker):
        sub.add_argument("--trials", type=positive(int), metavar="N",
                         help="distinct plans to measure, the baseline's included (overrides search.trials; default 24)")
        sub.add_argument("--time-budget", type=positive(float), metavar="S",
                         help="seconds for the search and the verification (overrides search.time_budget_s; default 600)")
    for sub in (optimize, worker, diagnose):
        sub.add_argument("--slots", type=int, metavar="N",
                         help="measure at most N runs at once on this machine, across advisor processes (1: take turns)")
        sub.add_argument("--unsandboxed", action="store_true",
                         help="run a script without its own copy of the machine, where namespaces are not available: "
                              "then only the interpreter's hooks keep its writes under its folder aside, and C code, "
                              "child processes and paths elsewhere are not contained")


def add_review_commands(command) -> None:
    """report, retune, schedule and ui: the commands over what sessions found."""
    report = command("report", run_report, "print the ranked recommendations of the latest session from MLflow")
    report.add_argument("--json", action="store_true", help="print them as JSON on stdout")
    report.add_argument("--html", action="store_true", help="write the session's report.html again, from what MLflow kept")
    report.add_argument("--run", metavar="RUN_ID", help="a past session's MLflow run id (default: the latest session)")
    retune = command("retune", run_retune, "re-check the latest advice; tune again if the workload changed")
    retune.add_argument("--json", action="store_true", help="print the outcome as JSON on stdout (the words on stderr)")

    schedule = command("schedule", run_schedule, "print, install or remove a crontab line that runs retune")
    schedule.add_argument("--cron", default="0 3 * * *", help="cron schedule (default: 03:00 every day)")
    action = schedule.add_mutually_exclusive_group()
    action.add_argument("--install", action="store_true", help="add the line to this user's crontab")
    action.add_argument("--remove", action="store_true", help="remove it from this user's crontab")

    ui = command("ui", run_ui, "start the MLflow UI on 127.0.0.1 over the config's tracking store")
    ui.add_argument("--port", type=int, default=5000)


def add_about_commands(commands) -> None:
    """recipes and schema: about advisor itself, no config read."""
    recipes = commands.add_parser("recipes", help="list every recipe: the kinds it applies to, the bottlenecks it "
                                                  "targets, its risk and its knobs")
    recipes.add_argument("--json", action="store_true", help="print them as JSON on stdout")
    recipes.set_defaults(command=run_recipes, name="recipes")
    schema = commands.add_parser("schema", help="print the config's JSON Schema (for an editor to check configs)")
    schema.set_defaults(command=run_schema, name="schema")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("verified-advisor")  # the distribution's name (the import is advisor)
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"
