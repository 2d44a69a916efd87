"""`advisor optimize` end to end on tiny jobs: outputs, the numerics gate, MLflow read back (the
shared session logs over HTTP to a real `mlflow server`; see conftest)."""

import json
import re
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml
from conftest import ROOT, TINY, free_port, merged, run_cli, write_config
from mlflow import MlflowClient

from advisor.kinds import load_config
from advisor.measure import cpu_has_bf16
from advisor.session import optimize
from advisor.tracking import experiment_name, tracking_uri

pytestmark = pytest.mark.integration


def test_terminal_shows_interval_and_numerics(optimized):
    result = optimized.result
    # a fetch-stalled job: its samples wait, so threads fetch them (with or without worker processes)
    assert re.search(r"1\s+[a-z_+]*fetch_threads[a-z_+]*\s+\d+\.\d\dx\s+\d+\.\d\d-\d+\.\d\dx\s+yes\s+ok", result.stdout), result.stdout
    assert "trial #0 [1/3]  baseline" in result.stderr, "live progress names each trial"
    assert "best" in result.stderr and re.search(r"round (\d+)/\1: baseline", result.stderr), "rounds up to a look"
    assert re.search(r"first verified fix \d+ s after the start: #\d+ \d+\.\d\dx", result.stderr), result.stderr[-3000:]


def test_recommendations_json_contract(optimized):
    results_dir = optimized.results_dir
    payload = json.loads((results_dir / "recommendations.json").read_text())
    assert payload["workload"] == "tiny" and payload["unit"] == "samples/s"
    assert payload["fingerprint"] and payload["baseline"]["samples_per_s"] > 0
    assert 0 < payload["first_verified_s"] <= payload["duration_s"]
    assert payload["diagnoses"][0]["bottleneck"] == "input-fetch" and payload["diagnoses"][0]["evidence"]
    top = payload["recommendations"][0]
    assert top["rank"] == 1 and top["verified"] and "fetch_threads" in top["recipes"]
    assert top["interval"][0] >= 1.2 and top["interval"][0] <= top["speedup"] <= top["interval"][1]
    assert top["numerics"]["passed"] and top["numerics"]["risk"] == "exact"
    assert "DataLoader(" in top["snippet"] and top["mlflow_run_id"]
    fetching = top["plan"]["dataloader.num_workers"] > 0 or top["plan"]["dataloader.fetch_threads"] > 1
    assert fetching and top["peak_memory_mb"] > 0, "its samples fetched side by side: worker processes, threads or both"
    for name in ("report.md", "breakdown.png", "speedup.png", "history.png"):
        assert (results_dir / name).stat().st_size > 1000
    assert "![speedup](speedup.png)" in (results_dir / "report.md").read_text()


def test_mlflow_layout(optimized):
    config = load_config(optimized.config)
    payload = json.loads((optimized.results_dir / "recommendations.json").read_text())
    assert tracking_uri(config) == optimized.server.url, "logged over HTTP to the tracking server"
    client = MlflowClient(tracking_uri=tracking_uri(config))
    experiment = client.get_experiment_by_name("tiny")
    runs = client.search_runs([experiment.experiment_id])
    sessions = [r for r in runs if r.data.tags.get("kind") == "session"]
    assert len(sessions) == 1
    session = sessions[0]
    assert session.data.tags["fingerprint"] == payload["fingerprint"]
    assert session.data.tags["bottleneck"] == "input-fetch"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == session.info.run_id]
    kinds = sorted(r.data.tags["kind"] for r in children)
    assert kinds.count("baseline") == 1 and kinds.count("trial") == 3
    assert kinds.count("recommendation") == len(payload["recommendations"])
    assert kinds.count("verification") == len(payload["recommendations"]), "each verification logged as it finished"
    assert session.info.status == "FINISHED"
    trials = sorted((r for r in children if r.data.tags["kind"] == "trial"), key=lambda r: r.data.metrics["trial"])
    assert all(session.info.start_time <= t.info.start_time < t.info.end_time <= session.info.end_time for t in trials)
    assert all(a.info.end_time <= b.info.start_time for a, b in zip(trials, trials[1:])), "their real times, in order"
    trial = next(r for r in children if r.data.tags["kind"] == "trial")
    assert "dataloader.num_workers" in trial.data.params
    assert {"samples_per_s", "step_ms_p50", "step_ms_p95", "peak_memory_mb", "stall_share"} <= set(trial.data.metrics)
    rec = next(r for r in children if r.info.run_id == payload["recommendations"][0]["mlflow_run_id"])
    assert rec.data.metrics["rank"] == 1 and rec.data.metrics["speedup_low"] >= 1.2
    assert rec.info.end_time - rec.info.start_time > 1000, "its span is the rounds that verified it, not the moment it was logged"
    recipes = "+".join(payload["recommendations"][0]["recipes"])
    assert rec.data.tags["verified"] == "true" and rec.data.tags["recipe"] == recipes
    assert "DataLoader(" in rec.data.tags["mlflow.note.content"]
    top = payload["recommendations"][0]
    assert rec.info.run_name == (f"#1 {top['speedup']:.2f}x verified {recipes} "
                                 f"({top['interval'][0]:.2f}-{top['interval'][1]:.2f}x), input-fetch")
    assert f"| 1 | {recipes} | {top['speedup']:.2f}x |" in session.data.tags["mlflow.note.content"], "the ranking on the session's page"
    artifacts = {a.path for a in client.list_artifacts(session.info.run_id)}
    assert {"recommendations.json", "report.md", "speedup.png", "history.png"} <= artifacts


def test_report_reads_mlflow(optimized):
    payload = json.loads((optimized.results_dir / "recommendations.json").read_text())
    result = run_cli("report", str(optimized.config))
    assert result.returncode == 0, result.stderr
    from advisor.cli import ranking
    from advisor.report import render_recommendations

    assert render_recommendations(payload) in result.stdout, "the table optimize printed"
    as_json = run_cli("report", str(optimized.config), "--json", "-q")
    assert as_json.returncode == 0, as_json.stderr
    printed = json.loads(as_json.stdout)
    assert printed == {**json.loads(json.dumps(ranking(payload, optimized.results_dir))), "results": None}, \
        "the shape optimize --json prints"


def test_optimize_json_is_the_ranking(optimized):
    """What `optimize --json` prints on stdout: the ranked recommendations, with their MLflow runs."""
    from advisor.cli import ranking

    payload = json.loads((optimized.results_dir / "recommendations.json").read_text())
    printed = json.loads(json.dumps(ranking(payload, optimized.results_dir)))
    top = printed["recommendations"][0]
    assert top["rank"] == 1 and "fetch_threads" in top["recipes"] and top["verified"] and top["mlflow_run_id"]
    assert printed["results"] == str(optimized.results_dir) and printed["baseline"]["samples_per_s"] > 0


def test_progress_bars_on_a_terminal():
    import io

    from advisor.cli import LiveBar

    shown = io.StringIO()
    live = LiveBar(shown)
    live("diagnosing the baseline:")
    live("  trial #3 [6/12]  x  ->  1 samples/s")
    live("  trial #4 [7/12]  y  ->  2 samples/s")
    assert live.bar.n == 7 and live.bar.total == 12 and live.what == "trials"
    live("  round 2/5: baseline 1/s")
    assert live.bar.n == 2 and live.bar.total == 5 and live.what == "rounds"
    live.close()
    text = shown.getvalue()
    assert "diagnosing the baseline:" in text and "trial #4 [7/12]" in text and "round 2/5" in text
    assert "7/12 [" in text and "<" in text, "the bar counts the work done and the time left"


def test_version_and_python_m():
    result = subprocess.run([sys.executable, "-m", "advisor", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0 and result.stdout.startswith("advisor "), result.stdout + result.stderr


def test_another_os_is_told_in_one_line(tmp_path, monkeypatch, capsys):
    from advisor.cli import main

    path = write_config(tmp_path, TINY)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert main(["diagnose", str(path)]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "Linux only" in said and "darwin" in said


def test_report_without_a_session_is_a_clear_error(tmp_path):
    result = run_cli("report", str(write_config(tmp_path, TINY)))
    assert result.returncode == 2 and "run advisor optimize first" in result.stderr


def test_ui_serves_the_tracking_store(optimized, tmp_path):
    """`advisor ui` over a config whose store is a sqlite file: here the server's own store."""
    config = yaml.safe_load(optimized.config.read_text())
    path = write_config(tmp_path, merged(config, {"tracking": {"uri": optimized.server.store}}))
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "advisor.cli", "ui", str(path), "--port", str(port)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline, body = time.time() + 90, ""
        while time.time() < deadline and not body:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/get-by-name?experiment_name=tiny")
                body = urllib.request.urlopen(request, timeout=5).read().decode()
            except OSError:
                time.sleep(0.2)
        assert '"name": "tiny"' in body.replace('":"', '": "')
    finally:
        import os
        import signal

        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_ui_on_a_tracking_server_points_at_it(optimized):
    result = run_cli("ui", str(optimized.config))
    assert result.returncode == 0 and f"open {optimized.server.url}" in result.stdout


@pytest.mark.skipif(not cpu_has_bf16(), reason="this CPU has no native bfloat16, so the amp recipe does not apply")
def test_numerics_failure_is_kept_out_of_the_ranking(tmp_path):
    path = write_config(tmp_path, merged(TINY, {
        "workload": {"model": "broken:small_mlp", "dataset": "broken:trouble_dataset"},
        "search": {"recipes": ["amp"], "trials": 2, "verify_top": 1},
        "constraints": {"loss_rtol": 1e-7},  # bf16 autocast cannot match float32 this closely
    }))
    result = optimize(load_config(path))
    assert not any("amp" in r.recipes for r in result.recommendations)
    assert any(r.recipes == ("amp",) and r.reason.startswith("numerics") for r in result.rejected)


def test_a_session_without_its_recommendations_json_reports_the_same_json_shape(optimized):
    """A session whose recommendations.json MLflow did not take: `report --json` builds the same
    shape from its runs alone, the fields they do not hold null."""
    from advisor.cli import RANKING_FIELDS, ranking, ranking_from_runs

    payload = json.loads((optimized.results_dir / "recommendations.json").read_text())
    run = {"run_id": "r1", "metrics": {"rank": 1.0, "speedup": 2.5, "speedup_low": 2.1, "speedup_high": 2.9},
           "tags": {"recipe": "dataloader+fetch_threads", "verified": "true"}}
    built = ranking_from_runs("tiny", {"run_id": "s1"}, [run])
    assert set(built) == set(ranking(payload, None)) and set(built["recommendations"][0]) == set(RANKING_FIELDS)
    top = built["recommendations"][0]
    assert top["recipes"] == ["dataloader", "fetch_threads"] and top["interval"] == [2.1, 2.9] and top["verified"]


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="mounts a small tmpfs: root only")
def test_a_results_folder_that_fills_at_the_end_keeps_the_ranking_and_says_where(optimized, tmp_path):
    """The folder was checked before the session, yet the disk filled meanwhile: once a
    traceback and a truncated recommendations.json; now the files written are whole, MLflow
    still gets the session, and one line says where the ranking is kept."""
    import os

    from advisor.api import write_or_keep
    from advisor.errors import UserError
    from advisor.tracking import SessionLog

    payload = json.loads((optimized.results_dir / "recommendations.json").read_text())
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)], check=True)
    try:
        with open(small / "filler", "wb") as handle:  # the disk fills while the session runs
            try:
                handle.write(os.urandom(1 << 20))
            except OSError:
                pass
        log = SessionLog(load_config(write_config(tmp_path, TINY)))
        with pytest.raises(UserError) as said:
            write_or_keep(payload, "the diagnosis", small / "results", log)
        leftover = sorted(p.name for p in (small / "results").glob("*")) if (small / "results").exists() else []
    finally:
        subprocess.run(["umount", "-l", str(small)], check=True)
    line = str(said.value)
    assert "\n" not in line and re.match(rf"results: {re.escape(str(small))}/results could not be written \(No space left on "
                                         r"device\).*; the ranking is kept at (\S+); free room there, then advisor report "
                                         r"--html writes the report again from MLflow", line), line
    kept = re.search(r"kept at (\S+);", line).group(1)
    assert json.loads(open(kept).read()) == payload
    os.unlink(kept)
    assert not [name for name in leftover if name.endswith(".json") and name != "recommendations.json"], leftover
    assert not log.error and not log.skipped, "MLflow got the session all the same"
    client = MlflowClient(tracking_uri(log.config))
    [session] = client.search_runs([client.get_experiment_by_name(experiment_name(log.config)).experiment_id],
                                   "tags.kind = 'session'")
    assert session.info.status == "FINISHED"
    assert json.loads(client.download_artifacts(session.info.run_id, "recommendations.json", str(tmp_path)) and
                      open(tmp_path / "recommendations.json").read())["recommendations"] == payload["recommendations"]
