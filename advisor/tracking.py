"""Everything MLflow: the only module that imports it.

Layout: one experiment per workload; a parent run per optimize session (tags: kind=session,
fingerprint, bottleneck); nested runs for the baseline, every trial and every recommendation
(params = plan keys; metrics = throughput, p50/p95 step ms, peak memory, stall share; for
recommendations rank, speedup and its interval, with the snippet as the run's description).
A `tracking.uri` of null means MLFLOW_TRACKING_URI when set, else a sqlite store next to the
config, so `advisor report` and `advisor ui` find it from any working directory.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Callable, Optional

from advisor.addresses import SERVED_SCHEMES, check_store_exists, local_sqlite_path, store_scheme, tracking_uri, unwritable_store
from advisor.config import AdvisorConfig
from advisor.errors import UserError
from advisor.outputs import write_whole
from advisor.plan import plan_key
from advisor.secrets import shown
from advisor.verdict import PLAIN_LEVEL, levels_of

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# MLflow prints each run's address as it ends (a tracking server's, login included): advisor
# prints the one review link that matters, without the login.
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
# A tracking server that went away must cost seconds, not MLflow's default minutes of retries.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
# MLflow's usage telemetry writes an installation id under ~/.config/mlflow and sends events from
# a thread of its own: advisor changes nothing outside its folders and keeps its measurements'
# machine quiet. A user's own setting is kept.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
logging.getLogger("mlflow").setLevel(logging.WARNING)
logging.getLogger("alembic").setLevel(logging.WARNING)

from mlflow import MlflowClient  # noqa: E402  (after quieting its logging)
from mlflow.entities import Metric, Param, RunTag  # noqa: E402

logging.getLogger("mlflow").setLevel(logging.WARNING)  # mlflow resets its level on import

PARENT_TAG = "mlflow.parentRunId"
DESCRIPTION_TAG = "mlflow.note.content"
RUN_NAME_TAG = "mlflow.runName"
MAX_PARAM_CHARS = 6000


def experiment_name(config: AdvisorConfig) -> str:
    return config.tracking.experiment or config.name


def artifact_location(config: AdvisorConfig) -> Optional[str]:
    """Where a new experiment keeps its artifacts: a tracking server's own root (None); beside a
    sqlite store's file; beside the config for any other database. Never the working folder,
    which is MLflow's own default (`./mlruns`)."""
    uri = tracking_uri(config)
    if store_scheme(uri) in (*SERVED_SCHEMES, "file"):  # the server's root; a file store's own folder
        return None
    store = local_sqlite_path(uri)
    return ((store.parent if store is not None else config.root) / "mlruns").resolve().as_uri()


EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
OWNER_TAG = "advisor.owner"  # machine:pid of the process that writes a session run


def write_guard(uri: str):
    """What a write to MLflow runs under: Ctrl-C (SIGTERM, SIGHUP) held until it is done, for a
    database store. Cut inside its transaction, a write left the store locked to the session's own
    next one (its end, KILLED), which waited out the database's 20 s timeout and failed. A
    tracking server's request holds no lock, and a server that stops answering must not hold Ctrl-C."""
    if store_scheme(uri) in SERVED_SCHEMES:
        return contextlib.nullcontext()
    from advisor.harness.lifetime import interrupts_held

    return interrupts_held()


class SessionLog:
    """One optimize session in MLflow, written as the work happens: the session run opens with the
    first trial, dated from the session's start (a session refused while diagnosing writes
    nothing); each trial and each verification is logged as it finishes, with its real start and
    end; the run closes FINISHED, FAILED or KILLED. A tracking failure never loses work: it
    warns once, and what could not be logged is listed at the end (the results folder has all)."""

    def __init__(self, config: AdvisorConfig, warn: Callable[[str], None] = lambda line: None,
                 tags: Optional[dict] = None):
        self.config, self.warn = config, warn
        self.error, self.skipped = unwritable_store(config), []
        if self.error:  # said once, now: MLflow itself would print each failed statement with its traceback
            warn(f"MLflow: the store {self.error}; the session goes on, its results folder keeps everything")
        self.tracker: Optional[Tracker] = None
        self.session: Optional[str] = None
        self.logged_trials: set[int] = set()
        self.recommendation_ids: list[str] = []
        self.verified_at: dict[str, tuple[float, float]] = {}  # a plan's verification rounds, start and end
        self.tags = tags or {}  # the session run opens with the first thing logged (`_call`), dated from now
        self.started = time.time()
        self.store_loaded = store_loaded_ahead(config)

    def _open(self, tags: dict) -> None:
        from advisor.harness.lifetime import owner

        self.store_loaded.join()
        self.tracker = Tracker(self.config)
        close_abandoned_sessions(self.tracker)
        self.session = self.tracker.start(
            f"optimize {time.strftime('%Y-%m-%d %H:%M:%S')}",
            {"kind": "session", "workload": self.config.name, OWNER_TAG: owner(), **tags},
            description=f"advisor optimize session over {self.config.path}", start_time=self.started,
        )

    def _call(self, what: str, action: Callable, *args) -> object:
        """Logs `what`, opening the session run first where nothing was logged yet: a session
        that ends before its first trial (bad input found while diagnosing) leaves MLflow as it was."""
        if self.error or (self.session is None and self.tracker is not None):  # failed, or closed
            self.skipped.append(what)
            return None
        try:
            with write_guard(tracking_uri(self.config)):
                if self.tracker is None:
                    self._open(self.tags)
                return action(*args)
        except Exception as exc:  # any tracking failure: the session goes on, the results folder keeps it all
            self.error = f"{type(exc).__name__}: {shown(str(exc).splitlines()[0])[:200] if str(exc) else ''}"  # hidden, then cut
            self.skipped.append(what)
            self.warn(f"MLflow: could not log {what} ({self.error}); going on: the results folder keeps everything")
            return None

    def trial(self, number: int, plan: dict, measurement: dict, feasible: bool, started: float, finished: float) -> None:
        def log() -> None:
            run_id = self.tracker.start(
                f"trial {number}",
                {"kind": "trial", "feasible": str(feasible).lower(), "workload": self.config.name,
                 "reason": measurement.get("reason", "")},
                parent=self.session, start_time=started,
            )
            self.tracker.log(run_id, params=plan, metrics={**run_metrics(measurement), "trial": number})
            self.tracker.finish(run_id, failed=not feasible, end_time=finished)
            self.logged_trials.add(number)

        self._call(f"trial {number}", log)

    def verification(self, name: str, plan: dict, verdict: dict, started: float, finished: float) -> None:
        self.verified_at[plan_key(plan)] = (started, finished)

        def log() -> None:
            run_id = self.tracker.start(
                f"verification {name}", {"kind": "verification", "verified": str(verdict["verified"]).lower(),
                                         "workload": self.config.name, "reason": verdict["reason"][:4000]},
                parent=self.session, start_time=started,
            )
            self.tracker.log(run_id, params=plan, metrics={
                "speedup": verdict["speedup"], "speedup_low": verdict["low"], "speedup_high": verdict["high"],
                "failed_runs": len(verdict.get("failures", ())), "pairs": len(verdict["ratios"]),
                "confidence": verdict.get("confidence", PLAIN_LEVEL)})
            self.tracker.finish(run_id, failed=not verdict["verified"], end_time=finished)

        self._call(f"the verification of {name}", log)

    def conclude(self, payload: dict, folder: Path, folder_written: bool = True) -> None:
        """The baseline, trials not logged yet (other workers', earlier sessions'), the ranked
        recommendations and the results folder; then the session closes FINISHED. Where the
        folder could not be written, recommendations.json goes to MLflow alone."""
        bottleneck = payload["diagnoses"][0]["bottleneck"] if payload["diagnoses"] else "none"
        self._call("the session's tags", lambda: self.tracker.log(
            self.session, params={"recipes_tried": ",".join(payload["recipes_tried"]) or "none"},
            metrics={"baseline_samples_per_s": payload["baseline"]["samples_per_s"],
                     "pruned_trials": len(payload.get("pruned", [])),
                     "pruned_unrun_s": payload.get("pruned_unrun_s", 0.0),
                     "ruled_out_plans": len(payload.get("ruled_out", [])),
                     **({"first_verified_s": payload["first_verified_s"]} if payload.get("first_verified_s") else {})},
            tags={"fingerprint": payload["fingerprint"], "bottleneck": bottleneck,
                  **({"baseline_failure": payload["baseline_failure"][:4000]} if payload.get("baseline_failure") else {}),
                  DESCRIPTION_TAG: ranking_table(payload, bottleneck)}))

        def baseline() -> None:
            run_id = self.tracker.start("baseline", {"kind": "baseline", "workload": self.config.name}, parent=self.session)
            self.tracker.log(run_id, params=payload["baseline"]["plan"], metrics=run_metrics(payload["baseline"]["measurement"]))
            self.tracker.finish(run_id)

        self._call("the baseline", baseline)
        for trial in payload["trials"]:
            if trial["number"] not in self.logged_trials:
                self.trial(trial["number"], trial["plan"], trial["measurement"], trial["feasible"], None, None)
        for rec in payload["recommendations"]:
            self._call(f"recommendation #{rec['rank']}", self._recommendation, rec, bottleneck)
        if payload.get("load_curve"):
            table = load_curve_table(payload["load_curve"])
            self._call("the load curve", lambda: self.tracker.client.log_table(self.session, table, "load_curve.json"))
        if self.recommendation_ids and len(self.recommendation_ids) == len(payload["recommendations"]):
            for rec, run_id in zip(payload["recommendations"], self.recommendation_ids):
                rec["mlflow_run_id"] = run_id
        if self.session and not self.error:
            payload["mlflow"] = {"uri": shown(tracking_uri(self.config)), "experiment": experiment_name(self.config),
                                 "session_run_id": self.session}
            if folder_written:
                write_whole(folder / "recommendations.json", json.dumps(payload, indent=2, default=str))
        if self.tracker and folder_written:
            self._call("the results folder", self.tracker.attach, self.session, folder)
        elif self.tracker:
            self._call("recommendations.json", lambda: self.tracker.client.log_text(
                self.session, json.dumps(payload, indent=2, default=str), "recommendations.json"))
        self.close("FINISHED")

    def _recommendation(self, rec: dict, bottleneck: str) -> None:
        started, finished = self.verified_at.get(plan_key(rec["plan"]), (None, None))
        run_id = self.tracker.start(
            recommendation_name(rec, bottleneck),
            {"kind": "recommendation", "verified": str(rec["verified"]).lower(), "recipe": "+".join(rec["recipes"]),
             "bottleneck": bottleneck, "workload": self.config.name,
             "speedup_basis": rec.get("speedup_basis", "objective")},
            parent=self.session, start_time=started,
            description=f"{rec['reason']}\n\n```python\n{rec['snippet']}\n```",
        )
        self.tracker.log(
            run_id, params=rec["plan"],
            metrics={"rank": rec["rank"], "speedup": rec["speedup"], "speedup_low": rec["interval"][0],
                     "confidence": rec.get("confidence", PLAIN_LEVEL),
                     "speedup_high": rec["interval"][1], "samples_per_s": rec["samples_per_s"],
                     "peak_memory_mb": rec["peak_memory_mb"], "failed_runs": rec.get("failed_runs", 0),
                     "rounds": rec.get("rounds", 0), "set_aside_rounds": rec.get("set_aside_rounds", 0),
                     **{f"latency_{key}": value for key, value in rec.get("latency_ms", {}).items()},
                     **{f"epoch_{key}": value for key, value in rec.get("epoch", {}).items()}},
        )
        self.tracker.finish(run_id, end_time=finished)  # its span: the rounds that verified it
        self.recommendation_ids.append(run_id)

    def close(self, status: str) -> None:
        """FINISHED, FAILED or KILLED; once."""
        if self.session and not self.error:
            self._call(f"the session's end ({status})", self.tracker.client.set_terminated, self.session, status)
        self.session = None

    @property
    def review(self) -> Optional[str]:
        return review_path(self.tracker.experiment_id) if self.tracker else None


def close_abandoned_sessions(tracker: "Tracker") -> list[str]:
    """Session runs left RUNNING by an advisor process of this host that is gone (killed with
    SIGKILL) are closed as KILLED, so that no reader mistakes them for a session under way."""
    from advisor.harness.lifetime import owner_gone

    closed = []
    for run in tracker.client.search_runs([tracker.experiment_id], "tags.kind = 'session' and attributes.status = 'RUNNING'"):
        if owner_gone(run.data.tags.get(OWNER_TAG, "")):
            tracker.client.set_terminated(run.info.run_id, "KILLED")
            closed.append(run.info.run_id)
    return closed


DATABASE_STORE_MODULE = "mlflow.store.tracking.sqlalchemy_store"  # what a database store's first client imports


def store_loaded_ahead(config: AdvisorConfig) -> threading.Thread:
    """Imports a database store's module in the background, now: MLflow imports it with the first
    client (SQLAlchemy's models, 1 s of CPU here), which the first trial's log would otherwise wait
    on, between the trials. Begun as the session starts, it runs while the fork server imports
    torch and the session waits on it. Nothing is written, so a session refused while diagnosing
    still leaves MLflow as it was. A tracking server's client needs no such module; and where the
    study is in a database too, Optuna imports SQLAlchemy on the main thread meanwhile, and two
    threads importing one package at once can each meet the other's half-made modules."""
    def load() -> None:
        with contextlib.suppress(Exception):  # an import that fails here fails again, said, where it is used
            importlib.import_module(DATABASE_STORE_MODULE)

    needed = store_scheme(tracking_uri(config)) not in (*SERVED_SCHEMES, "file") and "://" not in (config.search.storage or "")
    thread = threading.Thread(target=load if needed else lambda: None, name="advisor-mlflow-store", daemon=True)
    thread.start()
    return thread


class Tracker:
    """Writes one session into MLflow with an explicit client (no global active run)."""

    def __init__(self, config: AdvisorConfig):
        uri = tracking_uri(config)
        seed_new_sqlite_store(uri)
        self.client = MlflowClient(tracking_uri=uri)
        name = experiment_name(config)
        experiment = self.client.get_experiment_by_name(name)
        self.experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(
            name, artifact_location=artifact_location(config))
        if experiment is None or EXPERIMENT_KIND_TAG not in experiment.tags:
            # MLflow's UI opens GenAI experiments on a traces overview; this one's page is its runs.
            self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, "custom_model_development")

    def start(self, name: str, tags: dict, parent: Optional[str] = None, description: str = "",
              start_time: Optional[float] = None) -> str:
        all_tags = {RUN_NAME_TAG: name, **{k: str(v) for k, v in tags.items()}}
        if parent:
            all_tags[PARENT_TAG] = parent
        if description:
            all_tags[DESCRIPTION_TAG] = description
        started = int(start_time * 1000) if start_time else None
        return self.client.create_run(self.experiment_id, start_time=started, tags=all_tags, run_name=name).info.run_id

    def log(self, run_id: str, params: Optional[dict] = None, metrics: Optional[dict] = None, tags: Optional[dict] = None) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items() if v is not None],
            params=[Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in (params or {}).items()],
            tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()],
        )

    def finish(self, run_id: str, failed: bool = False, end_time: Optional[float] = None) -> None:
        self.client.set_terminated(run_id, "FAILED" if failed else "FINISHED", int(end_time * 1000) if end_time else None)

    def attach(self, run_id: str, folder: Path) -> None:
        self.client.log_artifacts(run_id, str(folder))


def load_curve_table(curves: dict) -> dict:
    """The load curves as one table's columns (MLflow shows it beside the session's artifacts):
    a row per rate replayed, by plan."""
    rows = [{"plan": name, **point} for name in ("baseline", "#1") for point in curves.get(name, [])]
    return {column: [row[column] for row in rows] for column in rows[0]} if rows else {}


def run_metrics(measurement: dict) -> dict:
    """The metrics every measured run logs."""
    return {
        "samples_per_s": measurement.get("samples_per_s"),
        "step_ms_p50": measurement.get("step_ms_p50"),
        "step_ms_p95": measurement.get("step_ms_p95"),
        "peak_memory_mb": measurement.get("peak_memory_mb"),
        "stall_share": measurement.get("data_wait_share"),
        "cpu_util": measurement.get("cpu_util"),
        "other_cpu_share": measurement.get("other_cpu_share"),
        **({"page_faults_per_step": measurement["page_faults_per_step"]} if measurement.get("page_faults_per_step") else {}),
        **({"epoch_end_s": epoch["end_s"], "epoch_charged_s": epoch["charged_s"]}
           if (epoch := measurement.get("epoch") or {}).get("end_s") is not None else {}),
    }


def recommendation_name(rec: dict, bottleneck: str) -> str:
    """A recommendation run's name, which the runs page shows without a click, most telling
    first (its column cuts long names): rank, speedup, verdict, fix, interval, bottleneck."""
    low, high = rec["interval"]
    return (f"#{rec['rank']} {rec['speedup']:.2f}x {'verified' if rec['verified'] else 'unverified'} "
            f"{'+'.join(rec['recipes'])} ({low:.2f}-{high:.2f}x), {bottleneck}")


def ranking_table(payload: dict, bottleneck: str) -> str:
    """The session run's description: the ranking as a Markdown table, rendered on its page."""
    lines = [f"Bottleneck: **{bottleneck}**; baseline {payload['baseline']['samples_per_s']:,.1f} {payload['unit']}.", "",
             f"| rank | fix | speedup | {levels_of(payload['recommendations'])} interval | verified |", "|---:|---|---:|---|---|"]
    for rec in payload["recommendations"]:
        low, high = rec["interval"]
        lines.append(f"| {rec['rank']} | {'+'.join(rec['recipes'])} | {rec['speedup']:.2f}x | {low:.2f}-{high:.2f}x | "
                     f"{'yes' if rec['verified'] else 'no'} |")
    if not payload["recommendations"]:
        lines.append("| - | nothing cleared the bar | | | |")
    return "\n".join(lines)


def review_path(experiment_id: str) -> str:
    """The MLflow UI page a reviewer wants: this experiment's recommendation runs, by rank (sorted
    by a metric, the UI lists them flat rather than folded under their sessions)."""
    query = urllib.parse.urlencode({"searchFilter": "tags.kind = 'recommendation'", "orderByKey": "metrics.`rank`",
                                    "orderByAsc": "true"}, quote_via=urllib.parse.quote)
    return f"#/experiments/{experiment_id}/runs?{query}"


def seed_new_sqlite_store(uri: str) -> None:
    """A new local sqlite store starts as a copy of an empty one with MLflow's schema, built once
    per MLflow version in advisor's cache (`schema_template`): MLflow would build each new store
    by running its whole chain of migrations, about 2 s of CPU a store. MLflow adds the default
    experiment, whose artifact location is the store's own, as it opens the copy. Where anything
    is amiss (no cache folder, no hard links), nothing is done and MLflow builds the store itself."""
    import uuid

    from advisor.harness.lifetime import owned_prefix, remove_orphans

    path = local_sqlite_path(uri)
    if path is None or path.exists():
        return
    remove_orphans(path.parent, f".{path.name}.")  # a copy a killed session left beside the store
    copy = path.with_name(f"{owned_prefix(f'.{path.name}.')}{uuid.uuid4().hex}")
    try:
        schema = schema_template().read_bytes()
        with os.fdopen(os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as handle:  # the umask's mode, as sqlite's
            handle.write(schema)
        os.link(copy, path)  # whole, and only where no other session created the store meanwhile
    except Exception:  # noqa: BLE001  (a seed is an optimization: MLflow's own way is the fallback)
        pass
    finally:
        copy.unlink(missing_ok=True)


def schema_template() -> Path:
    """An empty sqlite store at MLflow's latest schema, in advisor's cache ($XDG_CACHE_HOME or
    ~/.cache, then advisor/), built once per MLflow version; written whole (a rename)."""
    import tempfile

    import mlflow

    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "advisor"
    template = folder / f"mlflow-{mlflow.__version__}-schema.db"
    if template.exists():
        return template
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables

    from advisor.harness.lifetime import owned_prefix, remove_orphans

    folder.mkdir(parents=True, exist_ok=True)
    remove_orphans(folder, ".schema-")  # a build a killed session left
    handle, building = tempfile.mkstemp(dir=folder, prefix=owned_prefix(".schema-"), suffix=".db")
    os.close(handle)
    try:
        engine = sqlalchemy.create_engine(f"sqlite:///{building}")
        try:
            _initialize_tables(engine)
        finally:
            engine.dispose()
        os.replace(building, template)
    finally:
        Path(building).unlink(missing_ok=True)
    return template


def latest_session(config: AdvisorConfig, run_id: Optional[str] = None) -> tuple[dict, list[dict]]:
    """The latest session run (or the finished session `run_id`) and its recommendation runs (by
    rank), read back from MLflow."""
    check_store_exists(config)
    client = MlflowClient(tracking_uri=tracking_uri(config))
    experiment = client.get_experiment_by_name(experiment_name(config))
    if experiment is None:
        raise UserError(f"no MLflow experiment '{experiment_name(config)}' in {tracking_uri(config)}; run advisor optimize first")
    sessions = client.search_runs(  # finished ones only: a session under way, failed or killed has no ranking yet
        [experiment.experiment_id], "tags.kind = 'session' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"], max_results=1000 if run_id else 1,
    )
    if run_id:
        sessions = [run for run in sessions if run.info.run_id == run_id]
        if not sessions:
            raise UserError(f"no finished optimize session with run id {run_id} in experiment "
                            f"'{experiment_name(config)}'; without --run, advisor report reads the latest")
    if not sessions:
        raise UserError(f"no finished optimize session in experiment '{experiment_name(config)}'; "
                        "run advisor optimize first")
    session = sessions[0]
    children = client.search_runs(
        [experiment.experiment_id],
        f"tags.kind = 'recommendation' and tags.`{PARENT_TAG}` = '{session.info.run_id}'",
        order_by=["metrics.rank ASC"],
    )
    return _as_dict(session), [_as_dict(run) for run in children]


def _as_dict(run) -> dict:
    return {
        "run_id": run.info.run_id,
        "name": run.info.run_name,
        "tags": dict(run.data.tags),
        "params": dict(run.data.params),
        "metrics": dict(run.data.metrics),
    }


def latest_payload(config: AdvisorConfig) -> tuple[str, dict]:
    """The latest session's run id and its recommendations.json, read back from MLflow."""
    session, _ = latest_session(config)
    payload = session_payload_of(config, session["run_id"])
    if payload is None:
        raise UserError(f"the latest session (run {session['run_id']}) has no recommendations.json in MLflow "
                        "(its logging failed); run advisor optimize again")
    return session["run_id"], payload


def session_payload_of(config: AdvisorConfig, run_id: str) -> Optional[dict]:
    """A session's recommendations.json, read back from MLflow; None where it was not logged."""
    import json
    import tempfile

    client = MlflowClient(tracking_uri=tracking_uri(config))
    with tempfile.TemporaryDirectory() as folder:
        try:
            path = client.download_artifacts(run_id, "recommendations.json", folder)
        except Exception:  # noqa: BLE001 (MLflow's own errors, by store: the artifact is not there)
            return None
        return json.loads(Path(path).read_text())


def verified_plan_mismatch(config: AdvisorConfig, payload: dict) -> Optional[str]:
    """Where a session's verified #1, as its stored recommendations.json spells it, differs from
    the plan MLflow recorded when it was verified (its recommendation run's params, which MLflow
    never lets change), in words; None where they agree or nothing was verified."""
    best = next((r for r in payload.get("recommendations", []) if r.get("verified")), None)
    if best is None:
        return None
    run_id = best.get("mlflow_run_id")
    if not run_id:
        return "the stored #1 names no MLflow run of its verification"
    try:
        recorded = dict(MlflowClient(tracking_uri=tracking_uri(config)).get_run(str(run_id)).data.params)
    except Exception:  # noqa: BLE001 (MLflow's own errors, by store: no such run)
        return f"the stored #1's verification run {str(run_id)[:40]!r} is not in MLflow"
    stored = {key: str(value)[:MAX_PARAM_CHARS] for key, value in best.get("plan", {}).items()}
    for key in sorted(set(recorded) | set(stored)):
        if recorded.get(key) != stored.get(key):
            return (f"{str(key)[:80]} is {stored.get(key, 'absent')[:40]} in the stored plan, "
                    f"{recorded.get(key, 'absent')[:40]} when it was verified")
    return None


def log_recheck(config: AdvisorConfig, previous_run_id: str, status: str, detail: str, fingerprint_digest: str,
                verdict: Optional[dict]) -> str:
    """Logs a re-check of unchanged advice as its own run, linked to the session it re-checked."""
    tracker = Tracker(config)
    run_id = tracker.start(
        f"retune check {time.strftime('%Y-%m-%d %H:%M:%S')}",
        {"kind": "retune", "retune_of": previous_run_id, "status": status, "fingerprint": fingerprint_digest,
         "workload": config.name},
        description=detail,
    )
    if verdict:
        tracker.log(run_id, metrics={"speedup": verdict["speedup"], "speedup_low": verdict["low"],
                                     "speedup_high": verdict["high"], "confidence": verdict.get("confidence", PLAIN_LEVEL)})
    tracker.finish(run_id, failed=status.startswith("regressed"))
    return run_id
