"""Hostile input found by an audit, class by class: each refused in one line naming the problem
and the fix, before anything is written, or (where it is only found by measuring) said for what
it is. The table of whole-command cases is in `test_faults.BAD_ADDRESSES`."""

import dataclasses
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FIXTURES, TINY, config_path, merged, side_by_side, write_config

from advisor.errors import UserError
from advisor.evidence import Evidence
from advisor.fingerprint import check_evidence, fingerprint
from advisor.kinds import kind_of, load_config


def stored_evidence(name: str = "quickstart") -> Evidence:
    return Evidence.from_dict(json.loads((FIXTURES / "evidence" / f"{name}.json").read_text()))


def as_measured_for(config, evidence: Evidence) -> Evidence:
    """The evidence as `collect_evidence` names it: the config's name and its fingerprint now."""
    seen = fingerprint(config, kind_of(config.kind).seen(evidence))["components"]
    return dataclasses.replace(evidence, workload=config.name, kind=config.kind, fingerprint=seen)


def test_evidence_is_taken_only_for_the_workload_it_was_measured_for(tmp_path):
    config = load_config(write_config(tmp_path, TINY))
    own = as_measured_for(config, stored_evidence())
    check_evidence(config, own)  # its own: accepted
    with pytest.raises(UserError, match="measured for no named workload"):
        check_evidence(config, stored_evidence())  # saved before evidence named its workload
    other = load_config(write_config(tmp_path, merged(TINY, {"name": "other"}), "other.yaml"))
    with pytest.raises(UserError, match="measured for the train workload 'tiny', not the train workload 'other'"):
        check_evidence(other, own)
    pipeline = load_config(config_path("parse_bound"))
    with pytest.raises(UserError, match="not the pipeline workload 'parse_bound'"):
        check_evidence(pipeline, dataclasses.replace(own, workload="parse_bound"))
    changed = load_config(write_config(tmp_path, merged(TINY, {"workload": {"batch_size": 16}}), "changed.yaml"))
    with pytest.raises(UserError, match=r"as it was before \(config workload.batch_size: 8 -> 16\)"):
        check_evidence(changed, own)


def run_in(folder, *args, timeout: float = 180, unset: tuple = ()):
    """The advisor command in the user's folder, its temp files beside it (not in it); `unset`:
    variables of this environment the command runs without."""
    import os
    import subprocess
    import sys

    tmp = folder.parent / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**{k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", *unset)}, "TMPDIR": str(tmp)}
    return subprocess.run([sys.executable, "-m", "advisor.cli", *args], cwd=folder, capture_output=True, text=True,
                          timeout=timeout, env=env)


def marked_processes(mark: str, but: int = 0) -> list[str]:
    """The processes (but `but`) whose environment carries ADVISOR_TEST_MARK=mark: a test's own."""
    import psutil

    def marked(proc) -> bool:
        try:
            return proc.pid != but and proc.environ().get("ADVISOR_TEST_MARK") == mark
        except (psutil.Error, OSError):
            return False

    return [" ".join(proc.cmdline())[:160] for proc in psutil.process_iter() if marked(proc)]


def left_behind(mark: str, seconds: float) -> list[str]:
    """The marked processes still running after waiting up to `seconds` for them to leave."""
    import time

    deadline = time.time() + seconds
    while marked_processes(mark) and time.time() < deadline:
        time.sleep(0.05)
    return marked_processes(mark)


def one_line(process) -> str:
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in process.stderr, process.stderr[-3000:]
    return lines[0]


@pytest.mark.integration
def test_nothing_of_advisor_outlives_its_exit(tmp_path):
    """The fork server is killed as advisor exits: left to notice, it tore torch down for a second
    or more after advisor had ended, holding advisor's output open to whoever read it."""
    import os
    import subprocess
    import sys
    import uuid

    folder = tmp_path / "job"
    folder.mkdir()
    path = write_config(folder, TINY)
    mark = uuid.uuid4().hex
    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "ADVISOR_TEST_MARK": mark}
    with open(tmp_path / "output.txt", "w") as output:  # a file: the wait ends at advisor's exit, not at its output's close
        process = subprocess.Popen([sys.executable, "-m", "advisor.cli", "diagnose", str(path), "-q"], cwd=folder,
                                   stdout=output, stderr=subprocess.STDOUT, env=env)
        status = process.wait(timeout=180)
    assert status == 0, (tmp_path / "output.txt").read_text()[-3000:]
    assert marked_processes(mark) == [], "every process advisor started was gone when it exited"


@pytest.mark.integration
def test_a_baseline_whose_loss_is_nan_is_named_and_nothing_is_compared(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    path = write_config(folder, merged(TINY, {"workload": {"loss": "broken:nan_after"}}))
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    process = run_in(folder, "diagnose", str(path), "-q")
    assert process.returncode == 2
    assert "the baseline itself produces a nan loss at step 2 of its timed steps" in one_line(process)
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before, "nothing written"


def test_a_candidate_that_turns_finite_losses_into_nan_is_rejected_in_those_words():
    from advisor.kinds.train.compare import compare_losses

    verdict = compare_losses([1.0, float("nan"), float("nan")], [1.0, 0.9, 0.8], "tolerance", 0.05)
    assert not verdict.passed and verdict.note == "turns finite losses into nan at step 2 (the baseline's is 0.9)"
    assert compare_losses([1.0, 0.9], [1.0, 0.9], "tolerance", 0.05).passed


def test_after_a_crashed_baseline_the_report_says_so_not_that_nothing_cleared_the_bar():
    from advisor.report import render_recommendations

    payload = {"baseline": {"samples_per_s": 0.0}, "unit": "samples/s", "recommendations": [], "rejected": [],
               "min_speedup": 1.05, "trials": [{"number": 0}], "pruned": [],
               "baseline_failure": "crashed: RuntimeError: shape mismatch (at broken.py:47)"}
    text = render_recommendations(payload)
    assert "the baseline itself failed (crashed: RuntimeError: shape mismatch" in text
    assert "nothing clears the bar" not in text
    fitting = render_recommendations({**payload, "memory_fix": True, "baseline_failure": "over the memory budget: ..."})
    assert "the baseline itself failed" not in fitting, "a baseline over its budget is what a memory fix is for"


@pytest.mark.integration
def test_retune_after_a_baseline_that_never_ran_does_not_say_it_no_longer_runs(tmp_path):
    from advisor.retune import retune

    config = load_config(write_config(tmp_path, merged(TINY, {"workload": {"model": "broken:crashing_model"}})))
    previous = {"fingerprint_components": {}, "baseline": {"plan": {}}, "recommendations": [],
                "baseline_failure": "crashed: RuntimeError: shape mismatch", "memory_fix": False}
    with pytest.raises(UserError, match=r"the baseline does not run \(crashed: .*\); it failed in the last session too"):
        retune(config, previous)


@pytest.mark.parametrize("damage", [b"garbage\n", b'{"op_code": 0, "worker_id": "x"}\nnot json\n'])
def test_a_damaged_study_file_says_how_to_start_afresh(tmp_path, damage):
    from advisor import search

    config = load_config(write_config(tmp_path, TINY))
    (tmp_path / "tiny.optuna-journal").write_bytes(damage)
    with pytest.raises(UserError, match=r"search.storage: the study file .*tiny.optuna-journal cannot be read "
                                        r"\(.*\); run with --fresh to start the study afresh"):
        search.find_study(config)
    search.remove_study(config)  # what --fresh does
    assert search.find_study(config) is None


@pytest.mark.parametrize("config", [42, None, ["config.yaml"], 3.5])
def test_the_python_api_names_a_config_of_the_wrong_type(config):
    import advisor
    from advisor.config import ConfigError

    with pytest.raises(ConfigError, match=r"config: got .*; pass the path of a YAML config, a dict shaped like one"):
        advisor.optimize(config)
    with pytest.raises(ConfigError, match=r"config: got "):
        advisor.diagnose(config)


def test_advisor_diagnose_stays_the_function_once_the_session_has_run_its_imports():
    """A submodule named like the API's function would replace it on the package once imported
    (the second `advisor.diagnose(...)` of a script said "'module' object is not callable")."""
    import advisor
    import advisor.api  # noqa: F401  (imports every stage, as a first call does)
    import advisor.diagnosis  # noqa: F401

    assert advisor.diagnose.__module__ == "advisor" and advisor.optimize.__module__ == "advisor"


def test_an_open_load_that_cannot_arrive_within_the_timeout_names_the_three_keys(tmp_path):
    import yaml

    from advisor.config import ConfigError

    raw = yaml.safe_load((config_path("serve_encoder")).read_text())
    raw["load"] = {"mode": "open", "rate_per_s": 0.5}
    raw["measure"] = {**raw["measure"], "requests": 65, "timeout_s": 15}
    with pytest.raises(ConfigError, match=r"load.rate_per_s: 65 timed requests \(measure.requests\) arriving at 0.5/s "
                                          r"take about 130 s, past measure.timeout_s \(15 s\); raise the rate, lower "
                                          r"measure.requests, or set measure.timeout_s above 190 s"):
        load_config(write_config(tmp_path, raw))
    raw["load"]["rate_per_s"] = 50
    assert load_config(write_config(tmp_path, raw)).load.rate_per_s == 50


def test_a_worker_started_before_its_study_waits_for_it(tmp_path):
    """Job arrays start every worker with the optimize that makes the study: a worker waits."""
    import threading
    import time

    from advisor import search
    from advisor.session.planning import plan_session
    from advisor.session.trials import wait_for_study

    config = load_config(write_config(tmp_path, TINY))
    lines = []
    with pytest.raises(UserError, match=r"no study 'tiny' in .* after waiting 1 s; start it with advisor optimize"):
        wait_for_study(config, 1.0, lines.append, poll_s=0.2)
    assert len(lines) == 1 and lines[0].startswith("waiting up to 1 s for study 'tiny'")
    facts = plan_session(config, stored_evidence())

    def start_the_study() -> None:
        time.sleep(1.0)
        search.create_study(config, facts.space, {k: facts.baseline[k] for k in facts.space}, facts.to_attrs())

    starter = threading.Thread(target=start_the_study)
    started = time.time()
    starter.start()
    study = wait_for_study(config, 60.0, poll_s=0.2)
    starter.join()
    assert study.study_name == "tiny" and 0.9 < time.time() - started < 30


@pytest.mark.integration
def test_two_sessions_of_one_config_make_one_study_and_the_second_says_how_to_join(tmp_path):
    """Two `advisor optimize` of one fresh config at once once made two studies' records, two
    diagnoses and two rankings. The first claims the study before it diagnoses: the second is
    one line, exit 2, naming the running session and `advisor worker`; once the first is gone
    (even by SIGKILL), its claim lapses and a new session takes the study."""
    import signal
    import subprocess
    import sys
    import time

    from advisor.session.claim import SESSION_ATTR, claim_study

    path = write_config(tmp_path, merged(TINY, {"search": {"time_budget_s": 120}}))
    journal = tmp_path / "tiny.optuna-journal"
    env = {**{k: v for k, v in __import__("os").environ.items() if k != "MLFLOW_TRACKING_URI"}, "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen([sys.executable, "-m", "advisor.cli", "optimize", str(path), "-q"], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while SESSION_ATTR not in (journal.read_text() if journal.exists() else "") and time.monotonic() < deadline:
            time.sleep(0.2)
        started = time.monotonic()
        second = run_in(tmp_path, "optimize", str(path), timeout=120)
        assert second.returncode == 2, second.stderr[-2000:]
        line = second.stderr.strip().splitlines()[-1]
        assert f"a session of study 'tiny' is running (process {first.pid}, started 0 min ago); join it with: " \
               f"advisor worker {path}, or wait for it to end" in line, second.stderr[-2000:]
        assert time.monotonic() - started < 30 and "diagnosing" not in second.stderr
        fresh = run_in(tmp_path, "optimize", str(path), "--fresh", timeout=120)
        assert fresh.returncode == 2 and "is running" in fresh.stderr, "--fresh never removes a running session's study"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert sum(1 for r in records if r.get("op_code") == 0) == 1, "one create-study record"
    config = load_config(path)
    assert claim_study(config).user_attrs[SESSION_ATTR]["owner"].endswith(f":{__import__('os').getpid()}")


@pytest.mark.parametrize("uri, words", [
    ("file:///nonexistent/dir", "tracking.uri: neither /nonexistent/dir nor its folder exists"),
    ("sqlite:////nonexistent/mlflow.db", "tracking.uri: the folder of sqlite:////nonexistent/mlflow.db does not exist"),
])
def test_a_tracking_store_that_cannot_work_is_named_before_anything_is_measured(tmp_path, uri, words):
    from advisor.addresses import check_tracking

    config = load_config(write_config(tmp_path, merged(TINY, {"tracking": {"uri": uri}})))
    with pytest.raises(UserError, match=words):
        check_tracking(config)


@pytest.mark.parametrize("uri, where", [
    (None, "job/mlruns"),  # the sqlite default beside the config
    ("sqlite:///{tmp}/store/mlflow.db", "store/mlruns"),  # beside the store's file
    ("sqlite:///store/mlflow.db", "store/mlruns"),  # a relative one: the file sqlite opens, from the working folder
    ("http://127.0.0.1:5000", None),  # the server's own artifact root
])
def test_artifacts_live_with_the_store_never_in_the_working_folder(tmp_path, monkeypatch, uri, where):
    from advisor.tracking import artifact_location

    (tmp_path / "job").mkdir()
    (tmp_path / "store").mkdir()
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking = {"uri": uri.format(tmp=tmp_path)} if uri else {}
    config = load_config(write_config(tmp_path / "job", merged(TINY, {"tracking": tracking})))
    monkeypatch.chdir(tmp_path)
    expected = None if where is None else (tmp_path / where).resolve().as_uri()
    assert artifact_location(config) == expected


def test_ctrl_c_during_a_write_to_the_store_lands_once_the_write_is_done(tmp_path, monkeypatch):
    """A Ctrl-C cut a write to the sqlite store inside its transaction: the session's end (KILLED)
    then waited 20 s on the lock and failed (1 interrupted session in 6 in a test's loop). Held
    until the write is done, it raises right after; the write, and the end, land."""
    import os
    import signal

    from mlflow import MlflowClient

    from advisor.tracking import SessionLog, tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = load_config(write_config(tmp_path, TINY))
    log = SessionLog(config)
    written = []

    def cut_by_ctrl_c():
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs at the next bytecode, unless held
        log.tracker.log(log.session, metrics={"done": 1.0})
        written.append("the write")

    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)  # a suite started in the background ignores it
    try:
        with pytest.raises(KeyboardInterrupt):
            log._call("a write", cut_by_ctrl_c)
    finally:
        signal.signal(signal.SIGINT, ignored)
    assert written == ["the write"]
    session = log.session
    log.close("KILLED")
    run = MlflowClient(tracking_uri(config)).get_run(session)
    assert run.info.status == "KILLED" and run.data.metrics["done"] == 1.0 and log.skipped == []


def test_mlflows_usage_telemetry_is_off_unless_the_user_turned_it_on(tmp_path):
    """MLflow's telemetry writes an installation id under ~/.config/mlflow and sends events from a
    thread: off where advisor talks to MLflow, outside CI and pytest too (where MLflow turns it off
    itself); a user's own MLFLOW_DISABLE_TELEMETRY is kept."""
    import os
    import subprocess
    import sys

    quiet = {"PYTEST_CURRENT_TEST", "CI", "GITHUB_ACTIONS", "MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK"}
    env = {k: v for k, v in os.environ.items() if k not in quiet and not k.startswith("RUNBOT")} | {"HOME": str(tmp_path)}
    ask = "import advisor.tracking, mlflow.telemetry.utils as t; print(t.is_telemetry_disabled())"
    plain = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, env=env, timeout=120)
    chosen = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, timeout=120,
                            env={**env, "MLFLOW_DISABLE_TELEMETRY": "false"})
    assert (plain.stdout.strip(), chosen.stdout.strip()) == ("True", "False"), plain.stderr[-2000:] + chosen.stderr[-2000:]


def test_a_sessions_log_loads_the_database_stores_module_ahead_and_writes_nothing_before_its_first_trial(tmp_path):
    """The first trial's log once waited 0.8 s on MLflow importing its database store (between
    the trials, before the first verified fix); the log now imports it in the background from
    its start. Loading writes nothing: a session refused before its first trial leaves no store.
    A tracking server's log loads no database module, nor does a log whose study is in a database
    (Optuna imports SQLAlchemy on the main thread meanwhile)."""
    import subprocess
    import sys

    (tmp_path / "shared").mkdir()
    config = write_config(tmp_path, TINY)
    shared = write_config(tmp_path / "shared", merged(TINY, {"search": {"storage": "postgresql://advisor@127.0.0.1:9/study"}}))
    database = f"sqlite:///{tmp_path / 'store.db'}"
    ask = ("import os, sys, advisor.tracking as t; from advisor.kinds import load_config\n"  # one interpreter, the loads last
           f"for path, uri in [({str(config)!r}, 'http://127.0.0.1:9'), ({str(shared)!r}, {database!r}),\n"
           f"                  ({str(config)!r}, {database!r})]:\n"
           "    os.environ['MLFLOW_TRACKING_URI'] = uri\n"
           "    t.SessionLog(load_config(path)).store_loaded.join()\n"
           "    print(t.DATABASE_STORE_MODULE in sys.modules)")
    done = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "False", "True"], done.stdout + done.stderr[-2000:]
    assert not (tmp_path / "store.db").exists() and not (tmp_path / "mlflow.db").exists(), "nothing written"


def test_a_relative_sqlite_store_is_the_file_sqlite_opens_from_the_working_folder(tmp_path, monkeypatch):
    """sqlite:///store/mlflow.db is store/mlflow.db under the working folder, as sqlite opens it:
    the checks once read it as /store/mlflow.db, refusing a folder that was there or checking a
    file at the root of the machine."""
    from advisor.addresses import check_store_exists, check_tracking

    (tmp_path / "job").mkdir()
    (tmp_path / "store").mkdir()
    config = load_config(write_config(tmp_path / "job", merged(TINY, {"tracking": {"uri": "sqlite:///store/mlflow.db"}})))
    monkeypatch.chdir(tmp_path)
    check_tracking(config)
    with pytest.raises(UserError, match=f"no MLflow store at {tmp_path}/store/mlflow.db yet"):
        check_store_exists(config)
    (tmp_path / "store" / "mlflow.db").write_text("not a database")
    with pytest.raises(UserError, match=f"{tmp_path}/store/mlflow.db is not a SQLite database"):
        check_tracking(config)
    monkeypatch.chdir(tmp_path / "job")
    with pytest.raises(UserError, match=r"the folder of sqlite:///store/mlflow.db does not exist \(.*/job/store\)"):
        check_tracking(config)


@pytest.mark.integration
def test_a_session_run_from_another_folder_writes_nothing_there(tmp_path):
    """`cd elsewhere && advisor optimize /job/config.yaml`: MLflow's artifacts go beside its store
    (the sqlite file beside the config), not into the working folder as MLflow's own default would;
    and importing the job's modules, in advisor or its children, writes no `__pycache__` beside
    them, though the user's Python would (run here without PYTHONDONTWRITEBYTECODE)."""
    folder, elsewhere = tmp_path / "job", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    path = write_config(folder, merged(TINY, {"search": {"recipes": ["threads"], "trials": 2}}))
    process = run_in(elsewhere, "optimize", str(path), "-q", timeout=600, unset=("PYTHONDONTWRITEBYTECODE",))
    assert process.returncode == 0, process.stderr[-3000:]
    assert list(elsewhere.iterdir()) == [], "nothing in the working folder"
    assert not list(folder.rglob("*.pyc")), "no bytecode beside the job's modules"
    assert (folder / "mlflow.db").exists() and any((folder / "mlruns").rglob("recommendations.json"))


def test_a_lightning_datamodule_without_train_dataloader_is_named_like_a_module_without_training_step(tmp_path):
    pytest.importorskip("lightning")
    from advisor.kinds.lightning.child import load_lightning_job

    raw = {"name": "lit", "workload": {"kind": "lightning", "module": "shapes:lit_module",
                                       "datamodule": "shapes:lit_data_without_loader"}}
    config = load_config(write_config(tmp_path, raw))
    with pytest.raises(UserError, match=r"workload.datamodule: NoLoader has no train_dataloader; define "
                                        r"train_dataloader\(self\) returning the DataLoader it trains on"):
        load_lightning_job(config)()


@pytest.mark.integration
def test_a_step_that_never_updates_the_parameters_is_warned_of(tmp_path):
    from advisor.diagnosis import collect_evidence

    raw = {"name": "shapes", "workload": {"model": "shapes:returns_loss", "dataset": "shapes:records", "batch_size": 8},
           "measure": {"warmup_steps": 1, "steps": 6, "profile_steps": 2, "timeout_s": 60}}
    lines = []
    evidence = collect_evidence(load_config(write_config(tmp_path, merged(raw, {"workload": {"step": "shapes:step_never_steps"}}))),
                                lines.append)
    assert evidence.full.environment["parameters_changed"] is False
    assert any("warning: the model's parameters did not change over 6 timed steps: does the step call "
               "optimizer.step()?" in line for line in lines), lines
    lines.clear()
    evidence = collect_evidence(load_config(write_config(tmp_path, merged(raw, {"workload": {"step": "shapes:plain_step"}}))),
                                lines.append)
    assert evidence.full.environment["parameters_changed"] is True and not any("warning" in line for line in lines)


def snapshot(folder) -> dict:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def exit_2_runs(request, tmp_path_factory) -> dict:
    """Each selected case's run in a folder of its own, side by side (conftest's AT_ONCE): the
    process, and the folder's snapshot before and after."""
    def run(command, changes, words):
        folder = tmp_path_factory.mktemp("exit-2") / "job"
        folder.mkdir()
        path = write_config(folder, merged(TINY, changes))
        before = snapshot(folder)
        return run_in(folder, command, str(path), "-q"), before, snapshot(folder)

    return side_by_side(request, "test_exit_2_writes_nothing", run)


@pytest.mark.integration
@pytest.mark.parametrize("command, changes, words", [
    ("optimize", {"workload": {"model": "shapes:returns_loss", "dataset": "shapes:records",
                               "step": "shapes:step_returns_nothing"}}, "workload.step: the step returned NoneType"),
    ("optimize", {"workload": {"dataset": "broken:dataset", "dataset_args": {"n": 2}}}, "less than one batch"),
    ("report", {}, "no MLflow store at"),
    ("retune", {}, "no MLflow store at"),
])
def test_exit_2_writes_nothing(exit_2_runs, request, command, changes, words):
    """Bad input found while diagnosing (or a config never optimized): one line, exit 2, and the
    folder as it was: no MLflow store, no study journal, no results."""
    process, before, after = exit_2_runs[request.node.callspec.id]
    assert process.returncode == 2
    assert words in one_line(process)
    assert after == before, sorted(set(after) - set(before))


@pytest.mark.integration
def test_a_script_that_calls_advisor_without_the_main_guard_is_told_how_to_fix_it(tmp_path):
    import subprocess
    import sys

    write_config(tmp_path, TINY)
    call = "import advisor\nfound = advisor.diagnose('config.yaml')\nprint('measured', found.bottleneck)\n"
    (tmp_path / "unguarded.py").write_text(call)
    (tmp_path / "guarded.py").write_text("import advisor\n\nif __name__ == '__main__':\n    "
                                         + call.splitlines()[1] + "\n    print('measured')\n")
    unguarded = subprocess.run([sys.executable, "unguarded.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert unguarded.returncode == 1 and "measured" not in unguarded.stdout
    last = unguarded.stderr.strip().splitlines()[-1]
    assert "unguarded.py:2: advisor is called at the top level of the script" in last
    assert 'put the call under `if __name__ == "__main__":`' in last
    piped = subprocess.run([sys.executable, "-"], input=(tmp_path / "guarded.py").read_text(), cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)  # each child crashed, unreadable, before
    assert piped.returncode == 1 and "measured" not in piped.stdout and "crashed" not in piped.stderr
    assert "read from standard input" in piped.stderr.strip().splitlines()[-1] and "FILE.py" in piped.stderr
    guarded = subprocess.run([sys.executable, "guarded.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert guarded.returncode == 0 and "measured" in guarded.stdout, guarded.stderr[-2000:]


@pytest.mark.integration
def test_a_worker_refused_at_once_leaves_no_fork_server_behind(tmp_path):
    import os
    import subprocess
    import sys
    import uuid

    mark = uuid.uuid4().hex
    path = write_config(tmp_path, TINY)
    env = {**os.environ, "ADVISOR_TEST_MARK": mark}
    process = subprocess.Popen([sys.executable, "-m", "advisor.cli", "worker", str(path), "--wait-s", "0"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    said = process.stderr.readline()  # the refusal, printed once the fork server is stopped
    servers = [line for line in marked_processes(mark, but=process.pid) if "forkserver" in line]
    process.communicate(timeout=60)
    assert process.returncode == 2 and "no study 'tiny'" in said
    assert servers == [], "the fork server was still running when advisor said it was done"
    assert left_behind(mark, 2.0) == [], "multiprocessing's resource tracker leaves when advisor does"

def test_a_store_that_is_not_a_database_is_named_before_anything_runs(tmp_path):
    from advisor.addresses import check_store_exists, check_tracking

    config = load_config(write_config(tmp_path, TINY))
    (tmp_path / "mlflow.db").write_text("these are my notes, not a database")
    for check in (check_tracking, check_store_exists):  # optimize's, and report's and retune's
        with pytest.raises(UserError, match=r"tracking.uri: .*mlflow.db is not a SQLite database \(or cannot be read\)"):
            check(config)


def test_a_new_store_is_seeded_whole_from_the_schema_template_and_an_existing_one_is_left_alone(tmp_path, monkeypatch):
    """A new sqlite store is a copy of advisor's cached empty schema (built once per MLflow
    version): MLflow opens it as its own, adding its default experiment as it opens it, the
    file takes the umask's mode as sqlite's would, no temporary copy is left, and a store that
    exists already is never replaced. A cache that cannot be written leaves MLflow to build it."""
    import os
    import stat

    from advisor.tracking import Tracker, seed_new_sqlite_store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "job"
    folder.mkdir()
    config = load_config(write_config(folder, TINY))
    tracker = Tracker(config)
    template = next((tmp_path / "cache" / "advisor").glob("mlflow-*-schema.db"))
    default = tracker.client.get_experiment("0")
    assert default.name == "Default" and str(tmp_path / "cache") not in default.artifact_location, default.artifact_location
    assert tracker.client.get_experiment(tracker.experiment_id).name == "tiny"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE((folder / "mlflow.db").stat().st_mode) == 0o666 & ~mask
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []
    before = (folder / "mlflow.db").read_bytes()
    seed_new_sqlite_store(f"sqlite:///{folder / 'mlflow.db'}")
    assert (folder / "mlflow.db").read_bytes() == before and before != template.read_bytes()

    monkeypatch.setenv("XDG_CACHE_HOME", str(folder / "mlflow.db"))  # a file: no cache folder there
    other = tmp_path / "other"
    other.mkdir()
    assert Tracker(load_config(write_config(other, TINY))).client.get_experiment_by_name("tiny")


def test_a_store_copy_or_schema_build_a_killed_session_left_is_removed_by_the_next(tmp_path, monkeypatch):
    """Killed while it seeded a store or built the schema template, a session left its temporary
    file (a hidden copy beside the user's store, a build in the cache); the next one removes
    those whose process is gone, never a live one's, nor a file of the user's."""
    import os
    import subprocess
    import sys

    from advisor.harness.lifetime import pid_namespace
    from advisor.tracking import schema_template, seed_new_sqlite_store

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead, alive = f"{gone.pid}.{pid_namespace()}-", f"{os.getpid()}.{pid_namespace()}-"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache, job = tmp_path / "cache" / "advisor", tmp_path / "job"
    cache.mkdir(parents=True)
    job.mkdir()
    left = [cache / f".schema-{dead}x1.db", job / f".mlflow.db.{dead}1f"]
    kept = [cache / f".schema-{alive}x2.db", job / f".mlflow.db.{alive}2f", job / ".mlflow.db.notes-1"]
    for path in left + kept:
        path.write_bytes(b"partial")
    schema_template()
    seed_new_sqlite_store(f"sqlite:///{job / 'mlflow.db'}")
    assert (job / "mlflow.db").exists()
    assert [path.exists() for path in left + kept] == [False] * len(left) + [True] * len(kept)



def test_a_python_api_session_removes_the_run_folders_killed_sessions_left(tmp_path, monkeypatch):
    """A run folder of a killed session (its process gone) goes at the next session's start through
    the Python API too, as at the `advisor` command's; a live process's folder stays."""
    import os
    import subprocess
    import sys
    import tempfile

    from advisor import api
    from advisor.harness.lifetime import RUN_FOLDER_PREFIX, pid_namespace

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(api, "warm_up_fork_server", lambda config: None)  # the question is the sweep
    left = tmp_path / f"{RUN_FOLDER_PREFIX}{gone.pid}.{pid_namespace()}-x1"
    kept = tmp_path / f"{RUN_FOLDER_PREFIX}{os.getpid()}.{pid_namespace()}-x2"
    for folder in (left, kept):
        folder.mkdir()
        (folder / "spec.json").write_text("{}")
    api.start_children(api.as_config(merged(TINY, {}), root=FIXTURES))
    assert not left.exists() and kept.exists()

def test_a_read_only_store_is_one_line_and_the_session_logs_nothing_to_it(tmp_path):
    """A read-only mlflow.db once flooded stderr with 113 lines of SQL and tracebacks: the store
    is tried once (a write rolled back), said in one line, and left as it was."""
    import os
    import subprocess

    from advisor.tracking import SessionLog, Tracker, unwritable_store

    folder = tmp_path / "job"
    folder.mkdir()
    config = load_config(write_config(folder, TINY))
    assert unwritable_store(config) == ""  # no store yet: the folder takes one
    Tracker(config)  # the store, made as a session makes it
    assert unwritable_store(config) == "" and not list(folder.glob("mlflow.db-journal"))
    before = (folder / "mlflow.db").read_bytes()
    if os.geteuid() == 0:  # root writes through permissions: a read-only mount
        subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
    else:
        folder.chmod(0o555)
        (folder / "mlflow.db").chmod(0o444)
    try:
        warned = []
        log = SessionLog(config, warned.append)
        log.trial(0, {}, {"status": "ok", "samples_per_s": 1.0}, True, 0.0, 1.0)
        log.close("FINISHED")
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(folder)], check=True)
        else:
            folder.chmod(0o755)
    assert len(warned) == 1 and "mlflow.db cannot be written (attempt to write a readonly database" in warned[0], warned
    assert warned[0].endswith("the session goes on, its results folder keeps everything")
    assert log.skipped == ["trial 0"] and (folder / "mlflow.db").read_bytes() == before


# ------------------------------------------------------------------ the table of hostile cases, every kind

TRAIN = TINY
LIGHTNING = {"name": "lit", "workload": {"kind": "lightning", "module": "shapes:lit_module", "datamodule": "shapes:lit_data"},
             "measure": {"warmup_steps": 1, "steps": 4, "profile_steps": 2, "timeout_s": 60}, "search": {"precision": 0}}
SERVICE = {"name": "svc", "workload": {"kind": "infer", "model": "shapes:served_model", "requests": "shapes:served_requests"},
           "measure": {"warmup_requests": 2, "requests": 20, "profile_steps": 2, "timeout_s": 60}, "search": {"precision": 0}}
PIPELINE = {"name": "pipe", "workload": {"kind": "pipeline", "source": {"path": "sales.csv"}, "transform": "tables:total_by_key"},
            "measure": {"timeout_s": 60}, "search": {"precision": 0}}
BASES = {"train": TRAIN, "lightning": LIGHTNING, "infer": SERVICE, "pipeline": PIPELINE}
ADVISORS_OWN = ("advisor-results", "advisor-cache", "mlflow.db", "mlruns")  # and the study's journal

HOSTILE = [  # (kind, changes, command, exit status, words its one line holds)
    # training: the config
    ("train", {"workload": {"batch_size": 0}}, "diagnose", 2, "workload.batch_size: expected a number >= 1"),
    ("train", {"workload": {"dataloader": {"num_workers": -1}}}, "diagnose", 2, "workload.dataloader.num_workers"),
    ("train", {"measure": {"timeout_s": 0}}, "diagnose", 2, "measure.timeout_s: expected a number >= 1"),
    ("train", {"search": {"trials": 0}}, "optimize", 2, "search.trials: expected a number >= 1"),
    ("train", {"search": {"recipes": ["nope"]}}, "optimize", 2, "search.recipes: unknown recipe 'nope'"),
    ("train", {"search": {"recipes": 5}}, "optimize", 2, "search.recipes"),
    ("train", {"workload": {"device": "cuda"}}, "diagnose", 2, "workload.device: 'cuda' was asked for but no CUDA device"),
    # training: the code, found in the child (more: CHILD_REFUSED, their messages checked in one process)
    ("train", {"workload": {"model": "broken:not_a_model"}}, "diagnose", 2, "return a torch.nn.Module"),
    ("train", {"workload": {"loss": "broken:nan_after"}}, "diagnose", 2, "the baseline itself produces a nan loss"),
    ("train", {"workload": {"model": "broken:crashing_model"}}, "diagnose", 4, "the baseline itself failed (crashed:"),
    # Lightning
    ("lightning", {"workload": {"module": None}}, "diagnose", 2, "workload.module: missing"),
    ("lightning", {"workload": {"modul": "shapes:lit_module"}}, "diagnose", 2, "did you mean 'module'"),
    ("lightning", {"workload": {"module": "shapes:lit_without_step"}}, "diagnose", 2, "has no training_step"),
    # (the other jobs the child refuses: CHILD_REFUSED, their messages checked in one process)
    # services
    ("infer", {"load": {"mode": "open"}}, "diagnose", 2, "load.rate_per_s: missing"),
    ("infer", {"load": {"mode": "open", "rate_per_s": 0}}, "diagnose", 2, "load.rate_per_s: expected a number > 0"),
    ("infer", {"load": {"concurrency": 0}}, "diagnose", 2, "load.concurrency: expected a number >= 1"),
    ("infer", {"constraints": {"p95_ms": -1}}, "diagnose", 2, "constraints.p95_ms: expected a number > 0"),
    ("infer", {"search": {"objective": "throughput"}}, "diagnose", 2, "search.objective: throughput needs constraints.p95_ms"),
    ("infer", {"load": {"mode": "open", "rate_per_s": 0.5}, "measure": {"requests": 65, "timeout_s": 15}}, "diagnose", 2,
     "load.rate_per_s: 65 timed requests"),
    ("infer", {"workload": {"requests": "shapes:no_requests"}}, "diagnose", 2, "workload.requests"),  # (and CHILD_REFUSED)
    ("infer", {"workload": {"handler": "shapes:handler_raises"}}, "diagnose", 2, "workload.handler: it raised on request 0"),
    ("infer", {"workload": {"model": "shapes:served_then_crashes"}}, "diagnose", 4,
     "the baseline itself failed (crashed: RuntimeError: shape mismatch planted at this step"),
    # pipelines
    ("pipeline", {"workload": {"source": {"path": "missing.csv"}}}, "diagnose", 2, "workload.source.path: no file matches"),
    ("pipeline", {"workload": {"source": {"path": "sales.txt"}}}, "diagnose", 2, "no file matches"),
    ("pipeline", {"workload": {"sink": "nowhere/out.csv"}}, "diagnose", 2, "workload.sink: its folder"),
    ("pipeline", {"workload": {"sink": "sales.csv"}}, "diagnose", 2, "workload.sink: sales.csv is the source itself"),
    ("pipeline", {"workload": {"transform": "not a ref"}}, "diagnose", 2, "workload.transform: expected 'module:callable'"),
    ("pipeline", {"workload": {"transform": "tables:not_a_frame"}}, "diagnose", 2, "not a pandas DataFrame"),
    ("pipeline", {"workload": {"transform": "tables:no_such_function"}}, "diagnose", 2, "has no attribute 'no_such_function'"),
    ("pipeline", {"workload": {"partition_safe": "yes"}}, "diagnose", 2, "workload.partition_safe: expected true or false"),
    ("pipeline", {"workload": {"float_rtol": -1}}, "diagnose", 2, "workload.float_rtol: expected a number >= 0"),
    ("pipeline", {"workload": {"combine": "tables:nope"}}, "diagnose", 2, "has no attribute 'nope'"),
]


def hostile_id(case) -> str:
    kind, changes, command, status, words = case
    return f"{kind}-{command}-{status}-{words[:40]}"


@dataclass(frozen=True)
class HostileRun:
    process: subprocess.CompletedProcess
    written: set  # what the run left in the job's folder, by its first path part
    mark: str  # in the environment of every process it started


def run_hostile_case(case, folder: Path) -> HostileRun:
    """One case's advisor command, run in a folder of its own, and what it wrote there."""
    import os
    import sys
    import uuid

    kind, changes, command, _, _ = case
    job = folder / "job"
    job.mkdir(parents=True)
    path = write_config(job, merged(BASES[kind], changes))
    if kind == "pipeline":
        import tables

        tables.write_sales(job / "sales.csv", 2_000)
    before = snapshot(job)
    mark = uuid.uuid4().hex
    (folder / "tmp").mkdir()
    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "TMPDIR": str(folder / "tmp"),
           "ADVISOR_TEST_MARK": mark}
    process = subprocess.run([sys.executable, "-m", "advisor.cli", command, str(path), "-q"], cwd=job,
                             capture_output=True, text=True, timeout=300, env=env)
    written = {p.relative_to(job).parts[0] for p in set(snapshot(job)) - set(before)}
    return HostileRun(process, written, mark)


@pytest.fixture(scope="module")
def hostile_runs(request, tmp_path_factory) -> dict:
    """Every selected case's run, side by side (conftest's AT_ONCE; the suite's time: 43 advisor processes)."""
    return side_by_side(request, "test_hostile_input", lambda case: run_hostile_case(case, tmp_path_factory.mktemp("hostile")))


@pytest.mark.integration
@pytest.mark.parametrize("case", HOSTILE, ids=[hostile_id(case) for case in HOSTILE])
def test_hostile_input(hostile_runs, request, case):
    """Each case: the exit status the README gives, one line naming the problem, no traceback,
    nothing written but into advisor's own folders (nothing at all for exit 2), no process left."""
    _, _, _, status, words = case
    run = hostile_runs[request.node.callspec.id]
    assert run.process.returncode == status, run.process.stderr[-3000:]
    assert words in one_line(run.process)
    own = {name for name in run.written if name in ADVISORS_OWN or name.endswith(".optuna-journal")}
    assert run.written == (set() if status == 2 else own), sorted(run.written)
    assert left_behind(run.mark, 5.0) == []


# Jobs the child refuses, beside the table's end-to-end ones of each kind: the message is the
# kind's, the way to one line and exit 2 the table's (each end-to-end case imports torch anew in
# its fork server and its child, 3 s of a core, and Lightning's jobs import Lightning, 5 s more).
CHILD_REFUSED = [
    ("train", {"dataset_args": {"n": 0}}, "less than one batch"),
    ("train", {"loss": "broken:vector_loss"}, "must return a scalar"),
    ("infer", {"model": "broken:not_a_model"}, "return a torch.nn.Module"),
    ("infer", {"requests": "shapes:string_requests"}, "workload.requests"),
    ("lightning", {"module": "shapes:lit_not_a_module"}, "return a LightningModule"),
    ("lightning", {"module": "shapes:lit_manual"}, "uses manual optimization"),
    ("lightning", {"module": "shapes:lit_no_optimizer"}, "returned no optimizer"),
    ("lightning", {"datamodule": "shapes:not_a_datamodule"}, "return a LightningDataModule"),
    ("lightning", {"datamodule": "shapes:lit_data_without_loader"}, "has no train_dataloader"),
    ("lightning", {"datamodule": "shapes:lit_data_list"}, "return a DataLoader"),
    ("lightning", {"module_args": {"width": 3}}, "workload.module_args"),
]


@pytest.mark.integration
@pytest.mark.parametrize("kind, changes, words", CHILD_REFUSED, ids=[f"{kind}-{words}" for kind, _, words in CHILD_REFUSED])
def test_a_job_the_child_refuses_is_named_in_one_line(tmp_path, kind, changes, words):
    """The child's own entry (`run_spec`), run here: it refuses the job with one line naming it."""
    import cloudpickle

    from advisor.harness.child import run_spec

    if kind == "lightning":
        pytest.importorskip("lightning")
    config = load_config(write_config(tmp_path, merged(BASES[kind], {"workload": changes})))
    with pytest.raises(UserError) as refused:
        run_spec({"plan": kind_of(config.kind).baseline_plan(config), "mode": "full", "steps": 2}, cloudpickle.dumps(config))
    assert words in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


@pytest.mark.integration
def test_report_after_a_crashed_baseline_exits_4_and_says_why(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    path = write_config(folder, merged(TINY, {"workload": {"model": "broken:crashing_model"},
                                              "search": {"recipes": ["threads"], "trials": 2}}))
    optimized = run_in(folder, "optimize", str(path), "-q", timeout=600)
    assert optimized.returncode == 4, optimized.stderr[-3000:]
    assert "the baseline itself failed (crashed: " in optimized.stderr
    reported = run_in(folder, "report", str(path))
    assert reported.returncode == 4 and "nothing cleared the bar" not in reported.stdout
    assert "advisor: the baseline itself failed (crashed: " in reported.stderr


def test_report_html_writes_only_into_advisors_own_results_layout(tmp_path, monkeypatch):
    """A recommendations artifact in MLflow whose `started` spells a path: the page goes to the
    session's folder in advisor's layout, named by its run id, never where the stored text says."""
    import types

    import advisor.report_html
    from advisor.cli import session_stamp, write_report_page

    assert session_stamp("2026-11-27 22:30:05", "ab12") == "20261127-223005"
    assert session_stamp("../../../../tmp/evil", "0f1e2d3c-run") == "session-0f1e2d3c"
    assert session_stamp(None, "../..") == "session-unknown"
    written = []
    monkeypatch.setattr(advisor.report_html, "write_page",
                        lambda payload, folder, with_plots: written.append(folder) or folder / "report.html")
    config = types.SimpleNamespace(root=tmp_path, name="job")
    write_report_page(config, {"run_id": "9a8b7c"}, {"started": "/../../../etc/cron.d/x"})
    assert written == [tmp_path / "advisor-results" / "job" / "session-9a8b7c"]


def test_text_from_a_store_reaches_the_terminal_as_printable_text():
    from advisor.cli import printable

    stored = "fix\x1b[2J\x1b]0;owned\x07 it\x9b31m\nnext line\twith a tab"
    assert printable(stored) == "fix[2J]0;owned it31m\nnext line\twith a tab"


def test_a_number_yaml_reads_as_text_is_told_how_to_write_it(tmp_path):
    path = write_config(tmp_path, "name: tiny\nworkload: {model: broken:model, dataset: broken:dataset}\n"
                                  "constraints: {p95_ms: 1.0e9}\n")
    with pytest.raises(UserError, match=r"constraints.p95_ms: expected a number, got '1.0e9' \(str\); YAML reads 1.0e9 "
                                        r"as text: write 1000000000, or an exponent with a dot and its sign \(1.0e\+9\)"):
        load_config(path)


BOMB = "name: tiny\nworkload: {model: broken:model, dataset: broken:dataset}\nmeasure: {}\nx0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9))


@pytest.mark.parametrize("text, words", [
    (BOMB, "its aliases expand to over 100,000 values"),
    ("name: tiny\nworkload: &w {model: broken:model, dataset: broken:dataset, extra: *w}\n", "an alias refers to a value that holds it"),
    ("name: tiny\nworkload: {model: broken:model, dataset: broken:dataset}\nx: " + "[" * 800 + "]" * 800 + "\n",
     "nested over 64 levels deep"),
])
def test_a_config_that_would_blow_up_is_refused_at_load_in_one_line(tmp_path, text, words):
    import time

    path = write_config(tmp_path, text)
    started = time.perf_counter()
    with pytest.raises(UserError, match=words) as caught:
        load_config(path)
    assert time.perf_counter() - started < 5 and "\n" not in str(caught.value)


@pytest.mark.parametrize("content, words", [
    (lambda data: data["evidence"]["runs"]["full"].update(samples_per_s="fast"),
     "evidence.runs.full.samples_per_s: expected a number, got 'fast'"),
    (lambda data: data["evidence"]["runs"]["full"].update(losses=7), "evidence.runs.full.losses: expected a list"),
    ("[" * 100_000 + "]" * 100_000, "nests too deep"),
])
def test_a_malformed_evidence_file_is_one_line_naming_the_field(tmp_path, content, words):
    from advisor.cli import load_evidence

    path = tmp_path / "evidence.json"
    if callable(content):
        data = {"evidence": json.loads((FIXTURES / "evidence" / "quickstart.json").read_text())}
        content(data)
        path.write_text(json.dumps(data))
    else:
        path.write_text(content)
    with pytest.raises(UserError, match=words) as caught:
        load_evidence(str(path))
    assert "\n" not in str(caught.value)


@pytest.mark.integration
def test_a_blocked_results_folder_is_exit_2_before_anything_is_measured(tmp_path):
    """advisor-results next to the config is a file: the session would have run whole, then
    failed with a traceback, its verified #1 nowhere. Checked first: one line, exit 2, at once."""
    import time

    from conftest import run_cli

    config = write_config(tmp_path, TINY)
    (tmp_path / "advisor-results").write_text("not a folder")
    started = time.perf_counter()
    result = run_cli("optimize", str(config), timeout=120)
    assert result.returncode == 2 and time.perf_counter() - started < 60, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"advisor: error: the results folder: {tmp_path / 'advisor-results'} is a file, where "
        f"{tmp_path / 'advisor-results' / 'tiny'} would go; move it, or pass --results DIR")
    assert (tmp_path / "advisor-results").read_text() == "not a folder"
    from advisor.api import check_results_folder

    with pytest.raises(UserError, match="is a file, where"):
        check_results_folder(str(tmp_path / "advisor-results" / "deeper"))


def test_a_results_file_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A disk that fills midway leaves the last complete file, never a truncated one."""
    from advisor.outputs import write_whole

    target = tmp_path / "recommendations.json"
    write_whole(target, '{"complete": 1}')
    real_write = type(target).write_text

    def fills_up(self, text, *args, **kwargs):
        real_write(self, text[:5])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(type(target), "write_text", fills_up)
    with pytest.raises(OSError, match="No space left"):
        write_whole(target, '{"complete": 2, "longer": true}')
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"complete": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recommendations.json"]


@pytest.mark.integration
def test_ctrl_c_during_verification_keeps_the_finished_rounds_for_the_resume(tmp_path):
    """Once a resume started its verification again at round 1 (one case lost 11 rounds): the
    rounds finished before Ctrl-C are kept in the study, and the resumed session goes on from
    the next one, before any new trial (a new trial ran first, and a faster one was verified
    afresh, the kept rounds left unused)."""
    import os
    import re
    import signal
    import subprocess
    import sys

    from conftest import FETCH_STALLED

    (tmp_path / "latency.txt").write_text("3.0")
    path = write_config(tmp_path, FETCH_STALLED)  # precision 0: the resume measures round 3, and stops there if the verdict is clear
    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen([sys.executable, "-m", "advisor.cli", "optimize", str(path)], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             # a suite started in the background has SIGINT ignored, and a child inherits that
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    said = []
    for line in first.stderr:
        said.append(line)
        if re.match(r"\s+round 2/", line):  # two rounds of the verification are done
            first.send_signal(signal.SIGINT)
            break
    first.communicate(timeout=120)
    assert any(re.match(r"\s+round 2/", line) for line in said), "".join(said)[-3000:]
    resumed = run_in(tmp_path, "optimize", str(path), timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "2 round(s) kept from before: going on from round 3" in resumed.stderr, resumed.stderr[-3000:]
    assert not re.search(r"^\s+round [12]/\d+: baseline", resumed.stderr, re.M), "no round measured twice"
    going_on = resumed.stderr.index("2 round(s) kept from before")
    new_trial = re.search(r"^\s+trial #\d+ \[", resumed.stderr, re.M)
    assert new_trial is None or going_on < new_trial.start(), "the cut-off verification goes on before a new trial"
