"""Everything MLflow: the only module that imports it.

Layout: one experiment per workload; a parent run per optimize session (tags: kind=session,
fingerprint, bottleneck); nested runs for the baseline, every trial and every recommendation
(params = plan keys; metrics = throughput, p50/p95 step ms, peak memory, stall share; for
recommendations rank, speedup and its interval, with the snippet as the run's description).
A `tracking.uri` of null means MLFLOW_TRACKING_URI when set, else a sqlite store next to the
config, so `advisor report` and `advisor ui` find it from any working directory.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.parse
from pathlib import Path
from typing import Callable, Optional

from advisor.config import AdvisorConfig
from advisor.errors import UserError

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
logging.getLogger("mlflow").setLevel(logging.WARNING)
logging.getLogger("alembic").setLevel(logging.WARNING)

from mlflow import MlflowClient  # noqa: E402  (after quieting its logging)
from mlflow.entities import Metric, Param, RunTag  # noqa: E402

logging.getLogger("mlflow").setLevel(logging.WARNING)  # mlflow resets its level on import

PARENT_TAG = "mlflow.parentRunId"
DESCRIPTION_TAG = "mlflow.note.content"
RUN_NAME_TAG = "mlflow.runName"
MAX_PARAM_CHARS = 6000


def tracking_uri(config: AdvisorConfig) -> str:
    """The config's URI, else MLflow's own environment variable, else sqlite next to the config."""
    return config.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(config.root / 'mlflow.db').resolve()}"


def experiment_name(config: AdvisorConfig) -> str:
    return config.tracking.experiment or config.name


EXPERIMENT_KIND_TAG = "mlflow.experimentKind"


class Tracker:
    """Writes one session into MLflow with an explicit client (no global active run)."""

    def __init__(self, config: AdvisorConfig):
        self.client = MlflowClient(tracking_uri=tracking_uri(config))
        name = experiment_name(config)
        experiment = self.client.get_experiment_by_name(name)
        self.experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
        if experiment is None or EXPERIMENT_KIND_TAG not in experiment.tags:
            # MLflow's UI opens GenAI experiments on a traces overview; this one's page is its runs.
            self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, "custom_model_development")

    def start(self, name: str, tags: dict, parent: Optional[str] = None, description: str = "") -> str:
        all_tags = {RUN_NAME_TAG: name, **{k: str(v) for k, v in tags.items()}}
        if parent:
            all_tags[PARENT_TAG] = parent
        if description:
            all_tags[DESCRIPTION_TAG] = description
        return self.client.create_run(self.experiment_id, tags=all_tags, run_name=name).info.run_id

    def log(self, run_id: str, params: Optional[dict] = None, metrics: Optional[dict] = None, tags: Optional[dict] = None) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items() if v is not None],
            params=[Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in (params or {}).items()],
            tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()],
        )

    def finish(self, run_id: str, failed: bool = False) -> None:
        self.client.set_terminated(run_id, "FAILED" if failed else "FINISHED")

    def attach(self, run_id: str, folder: Path) -> None:
        self.client.log_artifacts(run_id, str(folder))


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
    }


def log_session(
    config: AdvisorConfig, payload: dict, write_results: Callable[[dict], Path], extra_tags: Optional[dict] = None
) -> dict:
    """Logs a finished session (the recommendations.json payload) and attaches its results.

    `write_results` is called with the payload completed by the MLflow run ids, and returns the
    folder to attach to the session run.

    Returns:
        {"session": run id, "recommendations": [run id per rank], "uri": tracking URI}
    """
    tracker = Tracker(config)
    bottleneck = payload["diagnoses"][0]["bottleneck"] if payload["diagnoses"] else "none"
    session = tracker.start(
        f"optimize {payload['started']}",
        {"kind": "session", "fingerprint": payload["fingerprint"], "bottleneck": bottleneck, "workload": config.name,
         **(extra_tags or {})},
        description=f"advisor optimize session over {config.path}",
    )
    tracker.log(session, params={"recipes_tried": ",".join(payload["recipes_tried"]) or "none"},
                metrics={"baseline_samples_per_s": payload["baseline"]["samples_per_s"]})

    baseline = tracker.start("baseline", {"kind": "baseline", "workload": config.name}, parent=session)
    tracker.log(baseline, params=payload["baseline"]["plan"], metrics=run_metrics(payload["baseline"]["measurement"]))
    tracker.finish(baseline)

    for trial in payload["trials"]:
        run_id = tracker.start(
            f"trial {trial['number']}",
            {"kind": "trial", "feasible": str(trial["feasible"]).lower(), "workload": config.name,
             "reason": trial["measurement"].get("reason", "")},
            parent=session,
        )
        tracker.log(run_id, params=trial["plan"], metrics={**run_metrics(trial["measurement"]), "trial": trial["number"]})
        tracker.finish(run_id, failed=not trial["feasible"])

    recommendation_ids = []
    for rec in payload["recommendations"]:
        run_id = tracker.start(
            f"#{rec['rank']} {'+'.join(rec['recipes'])}",
            {"kind": "recommendation", "verified": str(rec["verified"]).lower(), "recipe": "+".join(rec["recipes"]),
             "bottleneck": bottleneck, "workload": config.name},
            parent=session,
            description=f"{rec['reason']}\n\n```python\n{rec['snippet']}\n```",
        )
        tracker.log(
            run_id,
            params=rec["plan"],
            metrics={"rank": rec["rank"], "speedup": rec["speedup"], "speedup_low": rec["interval"][0],
                     "speedup_high": rec["interval"][1], "samples_per_s": rec["samples_per_s"],
                     "peak_memory_mb": rec["peak_memory_mb"], "failed_runs": rec.get("failed_runs", 0)},
        )
        tracker.finish(run_id)
        recommendation_ids.append(run_id)

    for rec, run_id in zip(payload["recommendations"], recommendation_ids):
        rec["mlflow_run_id"] = run_id
    payload["mlflow"] = {"uri": tracking_uri(config), "experiment": experiment_name(config), "session_run_id": session}
    tracker.attach(session, write_results(payload))
    tracker.finish(session)
    return {"session": session, "recommendations": recommendation_ids, "uri": tracking_uri(config),
            "review": review_path(tracker.experiment_id)}


def review_path(experiment_id: str) -> str:
    """The MLflow UI page a reviewer wants: this experiment's recommendation runs, by rank (sorted
    by a metric, the UI lists them flat rather than folded under their sessions)."""
    query = urllib.parse.urlencode({"searchFilter": "tags.kind = 'recommendation'", "orderByKey": "metrics.`rank`",
                                    "orderByAsc": "true"}, quote_via=urllib.parse.quote)
    return f"#/experiments/{experiment_id}/runs?{query}"


def latest_session(config: AdvisorConfig) -> tuple[dict, list[dict]]:
    """The latest session run and its recommendation runs (by rank), read back from MLflow."""
    client = MlflowClient(tracking_uri=tracking_uri(config))
    experiment = client.get_experiment_by_name(experiment_name(config))
    if experiment is None:
        raise UserError(f"no MLflow experiment '{experiment_name(config)}' in {tracking_uri(config)}; run advisor optimize first")
    sessions = client.search_runs(
        [experiment.experiment_id], "tags.kind = 'session'", order_by=["attributes.start_time DESC"], max_results=1
    )
    if not sessions:
        raise UserError(f"no optimize session in experiment '{experiment_name(config)}'; run advisor optimize first")
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
    import json
    import tempfile

    session, _ = latest_session(config)
    client = MlflowClient(tracking_uri=tracking_uri(config))
    with tempfile.TemporaryDirectory() as folder:
        path = client.download_artifacts(session["run_id"], "recommendations.json", folder)
        return session["run_id"], json.loads(Path(path).read_text())


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
                                     "speedup_high": verdict["high"]})
    tracker.finish(run_id, failed=status.startswith("regressed"))
    return run_id
