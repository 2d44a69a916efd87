"""The commands, one function each: they call the stages (`advisor.api`, `advisor.retune`,
`advisor.tracking`) and print what came of them."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Optional

from advisor.cli.arguments import config_of
from advisor.cli.progress import progress_printer
from advisor.cli.started import COMMAND_STARTED
from advisor.errors import UserError
from advisor.secrets import shown

EXIT_BASELINE_FAILED = 4  # diagnose, optimize, report: the job crashed or hung as it is, so no fix could be judged


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


def run_diagnose(args: argparse.Namespace) -> int:
    from advisor.api import diagnose
    from advisor.diagnosis import render_diagnosis

    done = diagnose(args.config, progress_printer(args))
    if args.json:
        print(json.dumps(done.to_dict(), indent=2))
    else:
        print(render_diagnosis(done.config.name, done.evidence, done.diagnoses))
    if done.baseline_failed:
        return baseline_failed(done.baseline_failed, "diagnose")
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


MLFLOW_JOBS = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"


def run_ui(args: argparse.Namespace) -> int:
    import os

    from advisor.tracking import tracking_uri

    config = config_of(args)
    if tracking_uri(config).startswith(("http://", "https://")):  # a tracking server serves its own UI
        print(f"the tracking server serves the MLflow UI: open {shown(tracking_uri(config))}")
        return 0
    # one worker a core, at most MLflow's 4: on 2 cores its 4 took 12 s to answer, 2 took 6 s
    workers = min(4, os.cpu_count() or 1)
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri(config),
               "--host", "127.0.0.1", "--port", str(args.port), "--workers", str(workers)]
    print(f"MLflow UI on http://127.0.0.1:{args.port} over {shown(tracking_uri(config))}", file=sys.stderr)
    # the UI shows runs: MLflow's job runner (scoring and archiving traces) would take a core for
    # 10 s after it starts, for work advisor's runs never ask; a user's own setting is kept
    os.environ.setdefault(MLFLOW_JOBS, "false")
    os.execv(command[0], command)
    return 0
