"""`advisor retune` after a real optimize: unchanged advice re-checked, a planted regression
reported with exit status 3, a changed model re-tuned warm-started, each linked in MLflow."""

import shutil
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import ROOT, TINY, run_cli, write_config
from mlflow import MlflowClient

from advisor import search
from advisor.fingerprint import describe_changes
from advisor.kinds import load_config
from advisor.tracking import tracking_uri

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tuned(optimized, tmp_path_factory):
    """A copy of the shared optimize session's folder (config, latency file, study journal); its
    MLflow runs are on the shared server. The tests here change the copy, never the original."""
    folder = tmp_path_factory.mktemp("retune") / "job"
    shutil.copytree(optimized.config.parent, folder)
    path = folder / optimized.config.name
    config = yaml.safe_load(path.read_text())
    config["measure"]["fresh_rounds"] = False  # the suite's time: the question here is retune's logic, not a claim's layout
    path.write_text(yaml.safe_dump(config))
    return path


def runs_of_kind(path, kind):
    client = MlflowClient(tracking_uri=tracking_uri(load_config(path)))
    experiment = client.get_experiment_by_name("tiny")
    return client.search_runs([experiment.experiment_id], f"tags.kind = '{kind}'", order_by=["attributes.start_time DESC"])


def test_unchanged_workload_rechecks_and_holds(tuned):
    result = run_cli("retune", str(tuned), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "retune tiny: holds" in result.stdout and "fingerprint unchanged" in result.stderr
    session = runs_of_kind(tuned, "session")[0]
    check = runs_of_kind(tuned, "retune")[0]
    assert check.data.tags["retune_of"] == session.info.run_id and check.data.tags["status"] == "holds"
    assert check.data.metrics["speedup_low"] >= 1.2


def test_planted_regression_exits_3(tuned):
    (tuned.parent / "latency.txt").write_text("0.0")  # the storage got fast: workers no longer help
    try:
        result = run_cli("retune", str(tuned), timeout=300)
    finally:
        (tuned.parent / "latency.txt").write_text("3.0")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "retune tiny: regressed" in result.stdout
    assert runs_of_kind(tuned, "retune")[0].data.tags["status"] == "regressed"


def test_changed_model_is_named_and_retuned_warm_started(tuned):
    previous = runs_of_kind(tuned, "session")[0]
    config = yaml.safe_load(tuned.read_text())
    config["workload"]["model_args"] = {"width": 32}  # a wider layer
    tuned.write_text(yaml.safe_dump(config))
    result = run_cli("retune", str(tuned), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "changed: config workload.model_args.width: None -> 32" in result.stdout
    assert "changed: model parameters" in result.stdout
    session = runs_of_kind(tuned, "session")[0]
    assert session.data.tags["retune_of"] == previous.info.run_id
    study = optuna.load_study(study_name="tiny", storage=search.open_storage(search.storage_url(load_config(tuned))))
    old_best = study.trials[1].params
    assert study.trials[1].system_attrs.get("fixed_params") == old_best, "the previous best plan was enqueued"
    assert old_best.get("dataloader.num_workers", 0) > 0 or old_best.get("dataloader.fetch_threads", 1) > 1, old_best


def test_describe_changes_in_words():
    old = {"sources": {"model": {"file": "m.py", "sha256": "a"}}, "parameters": 100, "torch": "2.13.0",
           "workload": {"model_args": {"width": 16}}, "hardware": {"cpu": "x", "cores": 2}}
    new = {"sources": {"model": {"file": "m.py", "sha256": "b"}}, "parameters": 200, "torch": "2.14.0",
           "workload": {"model_args": {"width": 32}}, "hardware": {"cpu": "x", "cores": 4}}
    assert describe_changes(old, new) == [
        "source of the model changed (m.py)", "model parameters 100 -> 200",
        "config workload.model_args.width: 16 -> 32", "torch 2.13.0 -> 2.14.0", "hardware cores: 2 -> 4",
    ]
    assert describe_changes(old, old) == []
    both = {"sources": {"model": {"file": "cnn.py", "sha256": "a"}, "dataset": {"file": "cnn.py", "sha256": "a"}}}
    edited = {"sources": {"model": {"file": "cnn.py", "sha256": "b"}, "dataset": {"file": "cnn.py", "sha256": "b"}}}
    assert describe_changes(both, edited) == ["source of the dataset and model changed (cnn.py)"]


def test_schedule_prints_the_crontab_line(tmp_path):
    path = write_config(tmp_path, TINY)
    result = run_cli("schedule", str(path), "--cron", "0 3 * * *")
    assert result.returncode == 0
    assert result.stdout.startswith("0 3 * * * cd ") and f"-m advisor.cli retune {path}" in result.stdout
    bad = run_cli("schedule", str(path), "--cron", "every night")
    assert bad.returncode == 2 and "5-field cron schedule" in bad.stderr


def test_schedule_quotes_every_path(tmp_path):
    import shlex

    folder = tmp_path / "a;b c"
    folder.mkdir()
    path = write_config(folder, TINY)
    result = run_cli("schedule", str(path), "--cron", "0 3 * * *")
    assert result.returncode == 0, result.stderr
    command = result.stdout.strip().split(" ", 5)[5].split(" # advisor retune")[0]
    words = shlex.split(command)
    assert words[:2] == ["cd", str(folder)] and str(path) in words, words


def test_an_unreadable_crontab_is_never_replaced(tmp_path):
    """`crontab -l` failing for another reason than an empty crontab: nothing is installed."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    written = tmp_path / "written.txt"
    fake = bin_dir / "crontab"  # a stand-in for the system's crontab: no cron daemon on this machine
    fake.write_text(f"#!/bin/sh\nif [ \"$1\" = -l ]; then echo 'crontab: cannot open: Permission denied' >&2; exit 1; fi\n"
                    f"cat > {written}\n")
    fake.chmod(0o755)
    path = write_config(tmp_path, TINY)
    result = subprocess.run([sys.executable, "-m", "advisor.cli", "schedule", str(path), "--install"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert result.returncode == 2 and "crontab -l failed" in result.stderr, result.stderr
    assert not written.exists(), "the user's crontab was not replaced"


def test_schedule_install_and_remove(tmp_path):
    path = write_config(tmp_path, TINY)
    if shutil.which("crontab") is None:
        result = run_cli("schedule", str(path), "--install")
        assert result.returncode == 2 and "crontab is not installed" in result.stderr
        pytest.skip("crontab is not installed here: the clear error was checked instead")
    before = subprocess.run(["crontab", "-l"], capture_output=True, text=True).stdout
    try:
        assert run_cli("schedule", str(path), "--install").returncode == 0
        assert f"retune {path}" in subprocess.run(["crontab", "-l"], capture_output=True, text=True).stdout
        assert run_cli("schedule", str(path), "--remove").returncode == 0
        assert f"retune {path}" not in subprocess.run(["crontab", "-l"], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["crontab", "-"], input=before, text=True, check=False)


def test_a_plan_edited_in_the_store_is_named_and_never_re_run(tuned, tmp_path):
    """recommendations.json in MLflow says 32 workers where 8 were verified: retune refuses it,
    naming the key, before measuring anything (the recommendation run's params are the record)."""
    import json

    session = runs_of_kind(tuned, "session")[0]
    client = MlflowClient(tracking_uri=tracking_uri(load_config(tuned)))
    original = Path(client.download_artifacts(session.info.run_id, "recommendations.json", str(tmp_path)))
    kept = original.read_text()
    payload = json.loads(kept)
    best = next(r for r in payload["recommendations"] if r["verified"])
    best["plan"]["dataloader.num_workers"] = 32
    edited = tmp_path / "edited" / "recommendations.json"
    edited.parent.mkdir()
    edited.write_text(json.dumps(payload))
    client.log_artifact(session.info.run_id, str(edited))
    try:
        result = run_cli("retune", str(tuned), timeout=300)
    finally:
        original.write_text(kept)
        client.log_artifact(session.info.run_id, str(original))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "dataloader.num_workers is 32 in the stored plan" in result.stderr and "not re-run" in result.stderr
    assert "measuring the baseline" not in result.stderr
