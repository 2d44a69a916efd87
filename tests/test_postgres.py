"""A study shared through a real PostgreSQL server: `advisor optimize` and two `advisor worker`
processes, one of them killed with -9 mid-trial.

The server comes from Debian's `postgresql` package, started here with `initdb` and `pg_ctl` in
a temporary folder as an unprivileged user, on 127.0.0.1. The test installs the package when
it is missing and the machine allows it (root with apt-get), and skips with the reason otherwise."""

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import ROOT, free_port
from test_search import MEASURED, load_study, measured_trials, quick_config, wait_for

from advisor import search
from advisor.harness.lifetime import machine
from advisor.kinds import load_config
from advisor.plan import plan_key

pytestmark = pytest.mark.integration


def postgres_binaries() -> Path:
    """The folder of initdb and pg_ctl: Debian keeps them outside PATH, under /usr/lib/postgresql."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    if shutil.which("initdb") and shutil.which("pg_ctl"):
        return Path(shutil.which("initdb")).parent
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("PostgreSQL is not installed, and installing it needs root and apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "postgresql"]):
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            pytest.skip(f"could not install postgresql: {done.stderr.strip().splitlines()[-1:]}")
    return postgres_binaries()


def as_server_user(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, its commands run as the `postgres` user."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@pytest.fixture(scope="module")
def postgres_url():
    pytest.importorskip("psycopg", reason="the PostgreSQL driver comes with verified-advisor[postgres]")
    binaries = postgres_binaries()
    folder = Path(tempfile.mkdtemp(prefix="advisor-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    data, port = folder / "data", free_port()
    run = lambda *command: subprocess.run(as_server_user(list(command)), capture_output=True, text=True, timeout=120)  # noqa: E731
    made = run(str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "advisor", "--no-sync")
    assert made.returncode == 0, made.stderr
    started = run(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-w", "-o",
                  f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
    assert started.returncode == 0, started.stderr + (folder / "server.log").read_text()
    try:
        yield f"postgresql://advisor@127.0.0.1:{port}/postgres"  # a plain URL: advisor picks the installed driver
    finally:
        run(str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


def as_another_machine(command: list[str]) -> list[str] | None:
    """The command in a pid namespace of its own, so that its pids mean nothing here, as on a
    second machine: only Optuna's heartbeat can tell that it died. None where the kernel does
    not allow it (no root and no user namespaces). `--kill-child`: killing unshare kills it."""
    isolate = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    if os.geteuid() != 0:
        isolate.insert(1, "--map-root-user")
    if not shutil.which("unshare") or subprocess.run([*isolate, "true"], capture_output=True).returncode != 0:
        return None
    return [*isolate, *command]


def test_optimize_and_two_workers_share_a_postgresql_study(tmp_path, postgres_url):
    """One leader and two workers on one study: a worker killed with -9 while it measures has its
    trial failed and run again; the budget is spent exactly, on distinct plans, with no trial
    left running. Where the kernel allows, the killed worker runs as a second machine would (its
    own pid namespace and temp folder), so its trial is failed by Optuna's heartbeat, not by
    advisor's check of a pid on this machine."""
    path = quick_config(tmp_path, trials=8, latency_ms=15.0)
    config = yaml.safe_load(path.read_text())
    config["search"]["storage"] = postgres_url
    path.write_text(yaml.safe_dump(config))
    config = load_config(path)
    env = {**os.environ, "ADVISOR_HEARTBEAT_S": "2"}  # Optuna's grace period: 4 heartbeats, 8 s
    run = lambda command, **extra: subprocess.Popen(  # noqa: E731
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**env, **extra})
    worker = [sys.executable, "-m", "advisor.cli", "worker", str(path)]
    leader = run([sys.executable, "-m", "advisor.cli", "optimize", str(path)])
    wait_for(lambda: len(measured_trials(config)) >= 1, 240, "the study to start")
    elsewhere = as_another_machine(worker)
    (tmp_path / "elsewhere-tmp").mkdir()
    victim = run(elsewhere, TMPDIR=str(tmp_path / "elsewhere-tmp")) if elsewhere else run(worker)
    helper = run(worker)

    def victim_measuring():
        """The victim's trials whose measurement is under way: a trial it has only asked may still
        be skipped (its plan measured already) and end FAIL by itself, with nothing to run again."""
        ran_by = lambda t: t.user_attrs.get(search.WORKER_ATTR, "")  # noqa: E731
        mine = (lambda t: ran_by(t).rpartition(":")[0] not in ("", machine())) if elsewhere else \
            (lambda t: ran_by(t).endswith(f":{victim.pid}"))
        measuring = lambda t: search.HEARTBEAT_ATTR in t.user_attrs and t.params  # noqa: E731
        return [t for t in load_study(config).get_trials(states=(optuna.trial.TrialState.RUNNING,))
                if mine(t) and measuring(t)]

    wait_for(victim_measuring, 240, "the victim worker to take a trial")
    killed = victim_measuring()[0]
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(30)
    helper_out, helper_err = helper.communicate(timeout=400)
    leader_out, leader_err = leader.communicate(timeout=400)
    assert helper.returncode == 0 and leader.returncode == 0, helper_err[-2000:] + leader_err[-2000:]

    trials = load_study(config).trials
    finished = [t for t in trials if t.state in MEASURED]
    assert len(finished) == 8, "the budget is spent exactly"
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING], "no trial left running"
    assert len({t.number for t in trials}) == len(trials)
    plans = Counter(plan_key(t.user_attrs[search.PLAN_ATTR]) for t in finished)
    assert all(count == 1 for count in plans.values()), f"no plan measured twice: {plans}"
    dead = next(t for t in trials if t.number == killed.number)
    assert dead.state == optuna.trial.TrialState.FAIL and not dead.user_attrs.get(search.SKIPPED_ATTR)
    again = [t for t in trials if t.params == dead.params and t.number > dead.number]
    told = [(t.number, t.state.name, t.user_attrs.get(search.SKIPPED_ATTR, "")[:80]) for t in trials]
    assert again, f"the killed trial was queued again: {told}"
    # run again, or passed over with its reason: a trial that lost clearly meanwhile rules out the plans that add to it
    assert again[0].state in MEASURED or again[0].user_attrs.get(search.SKIPPED_ATTR), f"the killed trial ran again: {told}"
    if elsewhere:
        assert not dead.user_attrs.get(search.INTERRUPTED_ATTR), "no pid check could judge another machine's trial"
        assert dead.number in search.retried(load_study(config)), "Optuna's heartbeat failed it and queued it again"
    else:
        assert dead.user_attrs.get(search.INTERRUPTED_ATTR), "advisor's pid check failed it"
    runners = Counter(t.user_attrs[search.WORKER_ATTR] for t in finished)
    assert len(runners) >= 2, f"the leader and the surviving worker both ran trials: {runners}"
    assert "worker finished: ran" in helper_out
    copy = f"#{again[0].number} ({again[0].state.name.lower()})"
    failed_by = "Optuna's heartbeat" if elsewhere else "advisor's pid check"
    print(f"\n{len(finished)} trials measured by {dict(runners)}; trial #{dead.number} killed with its worker "
          f"({killed.user_attrs[search.WORKER_ATTR]}), failed by {failed_by}, "
          f"queued again as {copy}; " + "; ".join(line.strip() for line in leader_out.splitlines() + leader_err.splitlines()
                                                if "waiting for" in line))


def test_a_trial_of_a_machine_that_went_down_is_failed_by_the_heartbeat_and_retried(postgres_url, monkeypatch):
    """A trial whose process ran on another machine cannot be checked by pid from here: only
    Optuna's heartbeat, kept in the database, says it stopped. Once the grace period passes, the
    next process to look fails it and queues the same plan again (RetryHeartbeatStaleTrialCallback)."""
    monkeypatch.setattr(search.heartbeat, "HEARTBEAT_S", 1.0)
    monkeypatch.setattr(search.heartbeat, "STALE_AFTER_S", 2.0)
    storage = search.open_storage(postgres_url)
    study = optuna.create_study(study_name="went-down", storage=storage, direction="maximize")
    with search.quiet_heartbeat():
        trial = study.ask()
    trial.suggest_categorical("dataloader.num_workers", [0, 2, 4])
    gone_elsewhere = "another-machine/0badb007:4242"
    trial.set_user_attr(search.WORKER_ATTR, gone_elsewhere)
    storage.record_heartbeat(trial._trial_id)  # it beat once, then its machine went down
    from advisor.harness.lifetime import owner_gone

    assert not owner_gone(gone_elsewhere), "this machine cannot judge another's pid"

    search.recover_stale_trials(study)
    assert study.trials[0].state == optuna.trial.TrialState.RUNNING, "within the grace period it stays running"
    wait_for(lambda: search.recover_stale_trials(study) or study.trials[0].state == optuna.trial.TrialState.FAIL,
             30, "the heartbeat to fail the silent trial")
    again = [t for t in study.trials if t.number > trial.number]
    assert [t.state for t in again] == [optuna.trial.TrialState.WAITING], "queued once, to run again"
    assert again[0].params == trial.params
    assert search.retried(study) == {trial.number}, "and it is not counted against the budget"
    assert search.counted_trials(study) == 0


PLANTED = "pl4nted-S3CRET"  # a password that must reach no output


def test_a_password_in_a_url_reaches_no_output(tmp_path, postgres_url, mlflow_server):
    """A working session whose study URL and tracking URI both carry a password (the server trusts
    any), and failing ones (a database and a tracking server that do not answer): the password is in
    no terminal line, no file the session wrote, and nothing the tracking server stored. The
    study's password comes from the environment (`${NAME}`); an unset variable is one line."""
    with_password = lambda url: url.replace("://advisor@", f"://advisor:{PLANTED}@")  # noqa: E731
    path = quick_config(tmp_path, trials=3)
    config = yaml.safe_load(path.read_text())
    config["name"] = "secrets"  # its own study: the module's database holds the other tests'
    config["search"]["storage"] = with_password(postgres_url).replace(PLANTED, "${ADVISOR_TEST_DB_PASSWORD}")
    config["tracking"] = {"uri": mlflow_server.url.replace("://", f"://advisor:{PLANTED}@")}
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "ADVISOR_TEST_DB_PASSWORD": PLANTED}
    cli = lambda *args, **extra: subprocess.run(  # noqa: E731  (a None in `extra` unsets the variable)
        [sys.executable, "-m", "advisor.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=400,
        env={k: v for k, v in {**env, **extra}.items() if v is not None})

    worked = cli("optimize", str(path))
    assert worked.returncode == 0, worked.stderr[-3000:]
    assert "study in postgresql://advisor:***@127.0.0.1" in worked.stderr, "the study's address is shown, hidden"
    written = next((tmp_path / "advisor-results").rglob("recommendations.json")).read_text()
    assert f"advisor:***@{mlflow_server.url.removeprefix('http://')}" in written, "the tracking URI is kept, hidden"
    reported = cli("report", str(path))
    assert reported.returncode == 0, reported.stderr[-2000:]

    for key, url in (("storage", f"postgresql://advisor:{PLANTED}@127.0.0.1:{free_port()}/postgres"),
                     ("tracking", f"http://advisor:{PLANTED}@127.0.0.1:{free_port()}")):
        broken = yaml.safe_load(path.read_text())
        broken["search"]["storage"] = url if key == "storage" else postgres_url
        broken["tracking"]["uri"] = url if key == "tracking" else mlflow_server.url
        (tmp_path / f"broken-{key}.yaml").write_text(yaml.safe_dump(broken))
    from conftest import at_once

    unset, missing, *failing = at_once([  # four one-line refusals, side by side
        lambda: cli("optimize", str(path), ADVISOR_TEST_DB_PASSWORD=""),
        lambda: cli("optimize", str(path), ADVISOR_TEST_DB_PASSWORD=None),
        lambda: cli("optimize", str(tmp_path / "broken-storage.yaml")),
        lambda: cli("optimize", str(tmp_path / "broken-tracking.yaml"))])
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "ADVISOR_TEST_DB_PASSWORD" in missing.stderr and "not set" in missing.stderr
    for refused in failing:
        assert refused.returncode == 2 and "advisor:***@127.0.0.1" in refused.stderr, refused.stderr

    terminal = "".join(done.stdout + done.stderr for done in (worked, reported, unset, missing, *failing))
    assert PLANTED not in terminal
    server_folder = Path(mlflow_server.store.removeprefix("sqlite:///")).parent
    leaked = [str(p) for p in [*tmp_path.rglob("*"), *server_folder.rglob("*")]
              if p.is_file() and p.suffix != ".yaml" and PLANTED.encode() in p.read_bytes()]  # but the user's configs
    assert leaked == [], f"the password was written to {leaked}"
