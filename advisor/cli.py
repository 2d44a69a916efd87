"""The `advisor` command. It only orchestrates: each stage lives in its own module."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from advisor.errors import UserError
from advisor.secrets import shown

COMMAND_STARTED = time.time()  # the user's clock: before torch, MLflow and Optuna are imported; a first fix counts from here

EXIT_BASELINE_FAILED = 4  # diagnose, optimize, report: the job crashed or hung as it is, so no fix could be judged


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    argv, script_command = split_script_command(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.name in ("recipes", "schema"):  # about advisor itself: no config, nothing measured
        return args.command(args)
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


SCRIPT_COMMANDS = ("diagnose", "optimize", "report", "retune", "ui", "worker")  # those a script's command line can name


def split_script_command(argv: list[str]) -> tuple[list[str], Optional[list[str]]]:
    """`advisor optimize -- python train.py --epochs 1`: advisor's own arguments, and the
    command line after `--` (None without one)."""
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def config_argument(args: argparse.Namespace, script_command: Optional[list[str]]) -> tuple[Any, str]:
    """The config the command runs on, and how to name it in the lines it prints: the config
    file's path as given, or, for `-- python SCRIPT ARGS`, a `kind: script` config rooted in the
    working folder (no file is written: the measurement children get it pickled)."""
    import shlex

    if script_command is None:
        if args.config is None:
            raise UserError(f"{args.name}: pass the path of a YAML config, or the script's command line after --: "
                            f"advisor {args.name} -- python train.py ARGS")
        return args.config, args.config
    if args.config is not None or args.name not in SCRIPT_COMMANDS:
        raise UserError(f"{args.name}: takes a config or, after --, a script's command line, not both"
                        if args.config is not None else
                        f"{args.name}: needs a config file; write one with workload.kind: script")
    from advisor.kinds import script_config

    return script_config(script_command, Path.cwd()), shlex.join(["--", *script_command])


def config_of(args: argparse.Namespace):
    """The command's config, read and validated; `--trials` and `--time-budget` override its search."""
    import dataclasses

    from advisor.kinds import load_config

    config = load_config(args.config) if isinstance(args.config, str) else args.config
    overrides = {key: value for key, value in (("trials", getattr(args, "trials", None)),
                                               ("time_budget_s", getattr(args, "time_budget", None))) if value is not None}
    return dataclasses.replace(config, search=dataclasses.replace(config.search, **overrides)) if overrides else config


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
    command's own start-up. Pipelines start fresh interpreters, and must not share the CPU with it."""
    if args.command not in (run_diagnose, run_optimize, run_worker, run_retune):
        return
    from advisor.errors import UserError
    from advisor.harness import launch
    from advisor.kinds import kind_of

    try:
        if not kind_of(config_of(args).kind).fresh_children:
            launch.warm_up()
    except UserError:
        pass  # the command reports it


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

    def command(name: str, handler, help_text: str, config_help: str = "path of the YAML config"):
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

    recipes = commands.add_parser("recipes", help="list every recipe: the kinds it applies to, the bottlenecks it "
                                                  "targets, its risk and its knobs")
    recipes.add_argument("--json", action="store_true", help="print them as JSON on stdout")
    recipes.set_defaults(command=run_recipes, name="recipes")
    schema = commands.add_parser("schema", help="print the config's JSON Schema (for an editor to check configs)")
    schema.set_defaults(command=run_schema, name="schema")
    return parser


RISK_WORDS = {"exact": "exact: the same results", "tolerance": "tolerance: results within a tolerance",
              "changes semantics": "changes semantics: changes what is computed, only where the config allows it"}


def recipe_table() -> list[dict]:
    """Every recipe as `advisor recipes` lists it: the workload kinds it applies to, as a config
    names them (a Lightning module takes the training recipes)."""
    from advisor.kinds import SECTIONS
    from advisor.recipes import RECIPES

    def kinds_of(families: tuple[str, ...]) -> list[str]:
        named = [kind for kind, section in SECTIONS.items() if section is not None and section.RECIPES in families]
        return named + [family for family in families if family not in named and family not in SECTIONS]

    return [{"name": r.name, "summary": r.summary, "kinds": kinds_of(r.kinds), "targets": list(r.targets),
             "risk": r.risk, "knobs": list(r.keys)} for r in RECIPES]


def run_recipes(args: argparse.Namespace) -> int:
    table = recipe_table()
    if args.json:
        print(json.dumps(table, indent=2))
        return 0
    for recipe in table:
        print(f"{recipe['name']}: {recipe['summary']}")
        print(f"    kinds: {', '.join(recipe['kinds'])}; targets: {', '.join(recipe['targets'])}; "
              f"risk: {RISK_WORDS[recipe['risk']]}")
        print(f"    knobs: {', '.join(recipe['knobs'])}")
    return 0


def run_schema(args: argparse.Namespace) -> int:
    from advisor.schema import schema

    print(json.dumps(schema(), indent=2))
    return 0


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("verified-advisor")  # the distribution's name (the import is advisor)
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def progress_printer(args: Optional[argparse.Namespace] = None):
    """Progress lines on stderr: under a live bar with an ETA where stderr is a terminal
    (`LiveBar`), plain lines otherwise (logs), none with -q."""
    if getattr(args, "quiet", False):
        return lambda line: None
    if sys.stderr.isatty():
        return LiveBar(sys.stderr)
    return lambda line: print(line, file=sys.stderr, flush=True)


class LiveBar:
    """Prints each progress line above one tqdm bar that follows the work under way: the trials
    ("[7/12]") or a verification's rounds ("round 3/5"), with the time left at their pace so far."""

    COUNTED = ((r"\[(\d+)/(\d+)\]", "trials"), (r"round (\d+)/(\d+)", "rounds"))

    def __init__(self, stream) -> None:
        self.stream, self.bar, self.what = stream, None, ""

    def __call__(self, line: str) -> None:
        import re

        from tqdm import tqdm

        counted = next(((int(found.group(1)), int(found.group(2)), what) for pattern, what in self.COUNTED
                        if (found := re.search(pattern, line))), None)
        if counted is not None:
            done, total, what = counted
            if self.bar is None or what != self.what or done <= self.bar.n and done == 1:
                self.close()
                self.bar, self.what = tqdm(total=total, desc=what, file=self.stream, leave=False, dynamic_ncols=True,
                                           bar_format="{desc} {bar} {n}/{total} [{elapsed}<{remaining}]"), what
            self.bar.total = max(total, done)
            self.bar.update(done - self.bar.n)
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def run_diagnose(args: argparse.Namespace) -> int:
    from advisor.api import diagnose
    from advisor.diagnosis import render_diagnosis

    done = diagnose(args.config, progress_printer(args))
    if args.json:
        print(json.dumps(done.to_dict(), indent=2))
    else:
        print(render_diagnosis(done.config.name, done.evidence, done.diagnoses))
    if not done.evidence.full.ok:
        return baseline_failed(done.evidence.full.reason, "diagnose")
    return 0


def run_optimize(args: argparse.Namespace) -> int:
    from advisor.api import optimize
    from advisor.failures import out_of_memory, over_slo

    config = config_of(args)
    evidence = load_evidence(args.evidence) if args.evidence else None
    done = optimize(config, progress_printer(args), results=args.results, fresh=args.fresh, evidence=evidence,
                    started=COMMAND_STARTED)
    print_session(config, done.payload, done.folder, done.mlflow, args.shown, as_json=args.json, verbose=args.verbose)
    result = done.session
    base = next((t.measurement for t in result.trials if t.number == 0), result.evidence.full)
    if not base.ok and not out_of_memory(base) and not over_slo(base):
        return baseline_failed(base.reason, "optimize")
    return 0


def baseline_failed(reason: str, command: str) -> int:
    """The job crashed or hung as it is: said on stderr, with the exit status that means it."""
    print(f"advisor: the baseline itself failed ({reason}); nothing can be compared with it: "
          f"fix the workload, then {command} again", file=sys.stderr)
    return EXIT_BASELINE_FAILED


def load_evidence(path: str):
    """The evidence inside the JSON that `advisor diagnose --json` printed."""
    from advisor.errors import UserError
    from advisor.evidence import Evidence

    try:
        data = json.loads(Path(path).read_text())["evidence"]
        check_runs(data)
        return Evidence.from_dict(data)
    except RecursionError:
        raise UserError(f"--evidence: {path} nests too deep to be the JSON of advisor diagnose --json") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"--evidence: {path} is not the JSON of advisor diagnose --json ({type(exc).__name__}: "
                        f"{printable(str(exc))[:300]})") from None


def check_runs(data: dict) -> None:
    """Each run's fields of the types a measurement has, or a ValueError naming the first that
    is not (a number where a number belongs: the diagnosis computes with them)."""
    import typing

    from advisor.measure import Measurement

    hints = typing.get_type_hints(Measurement)
    kinds = {float: (int, float), int: (int,), str: (str,), dict: (dict,), tuple: (list, tuple)}
    words = {float: "a number", int: "an integer", str: "text", dict: "a mapping", tuple: "a list"}
    if not isinstance(data, dict) or not isinstance(data.get("runs"), dict):
        raise ValueError("evidence.runs: expected a mapping of runs")
    for mode, run in data["runs"].items():
        if not isinstance(run, dict):
            raise ValueError(f"evidence.runs.{str(mode)[:40]}: expected a mapping")
        for name, value in run.items():
            expected = typing.get_origin(hints.get(name)) or hints.get(name)
            if expected in kinds and (not isinstance(value, kinds[expected]) or isinstance(value, bool) and expected is not bool):
                raise ValueError(f"evidence.runs.{str(mode)[:40]}.{name}: expected {words[expected]}, got {str(value)[:40]!r}")


def publish(config, result, results_arg: Optional[str], config_arg: str, extra_tags: Optional[dict] = None,
            args: Optional[argparse.Namespace] = None) -> dict:
    """Writes a finished session's results folder and MLflow session (retune), and prints them;
    returns the ranking as `optimize --json` prints it."""
    from advisor import tracking
    from advisor.api import record

    log = tracking.SessionLog(config, progress_printer(args), extra_tags)
    payload, folder = record(config, result, results_arg, log)
    print_session(config, payload, folder, log, config_arg, verbose=getattr(args, "verbose", False))
    return ranking(payload, folder)


def print_session(config, payload: dict, folder, log, config_arg: str, as_json: bool = False,
                  verbose: bool = False) -> None:
    """The ranking, where its results went, and what MLflow could not take; with `as_json`, the
    ranking as JSON on stdout and the rest on stderr; `verbose`: every rejected plan."""
    from advisor import tracking
    from advisor.report import render_recommendations

    out = sys.stderr if as_json else sys.stdout
    if as_json:
        print(json.dumps(ranking(payload, folder), indent=2, default=str))
    print(render_recommendations(payload, verbose), file=out)
    print(f"\nresults: {folder}  (recommendations.json, report.md, plots)", file=out)
    uri = shown(tracking.tracking_uri(config))
    if log.skipped:
        print(f"MLflow: not logged ({log.error}): {', '.join(log.skipped[:6])}"
              + (f" and {len(log.skipped) - 6} more" if len(log.skipped) > 6 else "")
              + "; the results folder above has everything", file=out)
        return
    print(f"MLflow: {uri}  session run {payload['mlflow']['session_run_id']}; browse with: advisor ui {config_arg}", file=out)
    base = uri if uri.startswith("http") else "http://127.0.0.1:5000"
    print(f"review the ranked recommendations at {base.rstrip('/')}/{log.review}", file=out)


RANKING_FIELDS = ("rank", "recipes", "speedup", "speedup_basis", "interval", "verified", "reason", "changes", "plan",
                  "numerics", "peak_memory_mb", "latency_ms", "snippet", "mlflow_run_id")


def ranking(payload: dict, folder) -> dict:
    """What `optimize --json` and `report --json` print: the ranked recommendations and where the
    rest lies (`results`: the local folder; null when read back from MLflow)."""
    return {
        "workload": payload["workload"], "unit": payload["unit"], "results": str(folder) if folder else None,
        "mlflow_session_run_id": (payload.get("mlflow") or {}).get("session_run_id"),
        "baseline": {"samples_per_s": payload["baseline"]["samples_per_s"], "latency_ms": payload["baseline"].get("latency_ms")},
        "recommendations": [{k: rec.get(k) for k in RANKING_FIELDS} for rec in payload["recommendations"]],
        "load_curve": payload.get("load_curve") or None,  # objective capacity: the baseline's and #1's
    }


def ranking_from_runs(workload: str, session: dict, recommendations: list[dict]) -> dict:
    """`ranking`'s shape from a session's MLflow runs alone (its recommendations.json was not
    logged): what their metrics and tags hold, every other field null."""
    def entry(run: dict) -> dict:
        metrics, tags = run["metrics"], run["tags"]
        known = {"rank": int(metrics["rank"]), "recipes": tags.get("recipe", "").split("+"), "speedup": metrics.get("speedup"),
                 "interval": [metrics.get("speedup_low"), metrics.get("speedup_high")],
                 "verified": tags.get("verified") == "true", "mlflow_run_id": run["run_id"],
                 "speedup_basis": tags.get("speedup_basis")}
        return {field: known.get(field) for field in RANKING_FIELDS}

    return {"workload": workload, "unit": None, "results": None, "mlflow_session_run_id": session["run_id"],
            "baseline": None, "recommendations": [entry(run) for run in recommendations], "load_curve": None}


def run_retune(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from advisor import tracking
    from advisor.retune import retune

    config = config_of(args)
    previous_run, previous = tracking.latest_payload(config)
    mismatch = tracking.verified_plan_mismatch(config, previous)
    if mismatch:  # the plan re-checked is the one verified, or none
        raise UserError(printable(f"the latest session's #1 no longer matches its verification record in MLflow "
                                  f"({mismatch}): it is not re-run; run advisor optimize again"))
    result = retune(config, previous, progress_printer(args))
    summary = {"workload": config.name, "status": result.status, "changes": list(result.changes),
               "detail": result.detail, "verdict": asdict(result.verdict) if result.verdict else None,
               "previous_session_run_id": previous_run, "recheck_run_id": None, "session": None,
               "exit_status": result.exit_code}
    with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):  # --json: the words go to stderr
        print(f"retune {config.name}: {result.status}")
        for change in result.changes:
            print(f"  changed: {change}")
        print(f"  {result.detail}")
        if result.new_session is not None:
            tags = {"retune_of": previous_run, "retune_status": result.status, "changes": "; ".join(result.changes)[:4000]}
            summary["session"] = publish(config, result.new_session, None, args.shown, tags, args)
        else:
            summary["recheck_run_id"] = tracking.log_recheck(config, previous_run, result.status, result.detail,
                                                             previous["fingerprint"], summary["verdict"])
            print(f"  MLflow run {summary['recheck_run_id']} (linked to session {previous_run})")
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    return result.exit_code


CRON_MARK = "# advisor retune"


def cron_line(config_path: str, schedule: str) -> str:
    from shlex import quote

    config = Path(config_path).resolve()
    log = config.parent / "advisor-retune.log"  # every path quoted: a folder named "a;b" stays one word
    return (f"{schedule} cd {quote(str(config.parent))} && {quote(sys.executable)} -m advisor.cli retune "
            f"{quote(str(config))} >> {quote(str(log))} 2>&1 {CRON_MARK} {config}")


def run_schedule(args: argparse.Namespace) -> int:
    import shutil
    import subprocess

    from advisor.errors import UserError
    from advisor.kinds import load_config

    load_config(args.config)  # a bad config is an error now, not at 3 a.m.
    if len(args.cron.split()) != 5:
        raise UserError(f"--cron: {args.cron!r} is not a 5-field cron schedule, e.g. \"0 3 * * *\"")
    line = cron_line(args.config, args.cron)
    if not (args.install or args.remove):
        print(line)
        return 0
    if shutil.which("crontab") is None:
        raise UserError("crontab is not installed; install cron, or add the line printed without --install yourself")
    listed = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    if listed.returncode != 0 and "no crontab" not in listed.stderr.lower():
        raise UserError(f"crontab -l failed ({listed.stderr.strip()[:200]}); the crontab was left as it is: "
                        "add the line printed without --install yourself")
    current = listed.stdout if listed.returncode == 0 else ""
    backup = Path(args.config).resolve().parent / "advisor-results" / f"crontab-before-{time.strftime('%Y%m%d-%H%M%S')}.txt"
    backup.parent.mkdir(parents=True, exist_ok=True)
    backup.write_text(current)
    marker = line[line.index(CRON_MARK):]
    kept = [entry for entry in current.splitlines() if not entry.endswith(marker)]
    lines = kept if args.remove else kept + [line]
    subprocess.run(["crontab", "-"], input="\n".join(lines) + "\n", text=True, check=True)
    print(("removed: " if args.remove else "installed: ") + line)
    print(f"the crontab as it was is kept in {backup}")
    return 0


def run_worker(args: argparse.Namespace) -> int:
    from advisor import search
    from advisor.session import join_study

    config = config_of(args)
    search.check_storage(config)
    ran = join_study(config, progress_printer(args), wait_s=args.wait_s)
    print(f"worker finished: ran {ran} trial(s) of study '{config.name}'")
    return 0


def printable(text: str) -> str:
    """Text read back from a store, as the terminal may show it: control characters (escape
    sequences that move the cursor, clear the screen or retitle the window) dropped, lines kept."""
    return "".join(c for c in str(text) if c in "\n\t" or (c.isprintable()))


def say(text: str) -> None:
    print(printable(text))


def run_report(args: argparse.Namespace) -> int:
    """The latest session's ranking as `optimize` printed it (`--json`: the same shape as
    `optimize --json`), read back from MLflow."""
    from advisor.report import render_recommendations
    from advisor.tracking import latest_session, session_payload_of

    config = config_of(args)
    session, recommendations = latest_session(config, args.run)
    payload = session_payload_of(config, session["run_id"])
    if args.html:
        return write_report_page(config, session, payload)
    if args.json and payload is not None:
        print(json.dumps(ranking(payload, None), indent=2, default=str))
        return 0
    if args.json:
        print(json.dumps(ranking_from_runs(config.name, session, recommendations), indent=2, default=str))
        return 0
    say(f"{config.name}: session {session['name']} (run {session['run_id']}), bottleneck {session['tags'].get('bottleneck')}")
    failure = session["tags"].get("baseline_failure")
    if failure:
        return baseline_failed(printable(failure), "optimize")
    if payload is not None:
        say(render_recommendations(payload, args.verbose))
        return 0
    if not recommendations:  # a session whose recommendations.json MLflow did not take: its runs
        print("no recommendations: nothing cleared the bar")
    from advisor.verdict import PLAIN_LEVEL, level_words

    for rec in recommendations:
        metrics = rec["metrics"]
        say(
            f"#{int(metrics['rank'])} {rec['tags'].get('recipe')}: {metrics['speedup']:.2f}x "
            f"({level_words([metrics.get('confidence', PLAIN_LEVEL)])} {metrics['speedup_low']:.2f}-{metrics['speedup_high']:.2f}x), "
            f"verified {rec['tags'].get('verified')}, run {rec['run_id']}"
        )
    return 0


STARTED = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}"  # recommendations.json's `started`, as a session writes it


def session_stamp(started, run_id: str) -> str:
    """The results folder's name for a session, from advisor's own layout: its start time where
    the stored text is one, else its run id's hex digits; never a path the stored data spells."""
    import re

    if isinstance(started, str) and re.fullmatch(STARTED, started):
        return started.replace("-", "").replace(":", "").replace(" ", "-")
    return "session-" + (re.sub(r"[^0-9a-f]", "", str(run_id).lower())[:32] or "unknown")


def write_report_page(config, session: dict, payload: Optional[dict]) -> int:
    """report.html for a session, rebuilt from its recommendations.json in MLflow, into the
    results folder a session of that time would have (advisor's own, next to the config)."""
    from advisor.report_html import write_page

    if payload is None:
        raise UserError(f"session run {session['run_id']} has no recommendations.json in MLflow (its logging failed); "
                        "its report.html cannot be rebuilt")
    path = write_page(payload, config.root / "advisor-results" / config.name / session_stamp(payload.get("started"),
                                                                                         session["run_id"]), with_plots=True)
    print(f"report: {path}")
    return 0


def run_ui(args: argparse.Namespace) -> int:
    import os

    from advisor.tracking import tracking_uri

    config = config_of(args)
    if tracking_uri(config).startswith(("http://", "https://")):  # a tracking server serves its own UI
        print(f"the tracking server serves the MLflow UI: open {shown(tracking_uri(config))}")
        return 0
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri(config),
               "--host", "127.0.0.1", "--port", str(args.port)]
    print(f"MLflow UI on http://127.0.0.1:{args.port} over {shown(tracking_uri(config))}", file=sys.stderr)
    os.execv(command[0], command)
    return 0


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


if __name__ == "__main__":
    run()
