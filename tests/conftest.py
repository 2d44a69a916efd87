import copy
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from advisor.measure import cpu_has_bf16
from experiments import config_path  # noqa: F401  (the tests' way to a reference config by name)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(FIXTURES))  # the fixture modules (tables, broken) import as top-level modules

TINY = {
    "name": "tiny",
    "workload": {"model": "broken:model", "dataset": "broken:dataset", "batch_size": 8},
    # Rounds forked as trials are, for the suite's time (a new interpreter costs 3-4 s on a
    # 2-core machine, most of it importing torch): fresh interpreters (the default) are tested
    # where claims are made (the flaky-plan test, the README's example, the script and service
    # references, the reference configs but the memory one).
    "measure": {"warmup_steps": 1, "steps": 4, "profile_steps": 2, "timeout_s": 60, "fresh_rounds": False},
    # Verdicts stop once they are clear, for the suite's time: the rounds search.precision adds to
    # a verified claim are tested in test_verify, and in the README's example (within its budget).
    "search": {"precision": 0},
}


def merged(base: dict, changes: dict) -> dict:
    """A deep copy of `base` with `changes` merged in; a None value removes the key."""
    result = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)  # never shared with the caller's constants
    return result


def write_config(folder: Path, config, name: str = "config.yaml") -> Path:
    """Writes a config (a mapping, or raw YAML text) beside copies of the fixture modules."""
    for fixture in FIXTURES.glob("*.py"):
        (folder / fixture.name).write_text(fixture.read_text())
    path = folder / name
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    return path


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "advisor.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "PYTHONUNBUFFERED": "1"},
    )


AT_ONCE = 2  # advisor processes run side by side where a test's question is not a timing: on 2 cores,
# each is mostly its own imports and its child's, one core each


def at_once(calls: list[Callable[[], Any]]) -> list:
    """Calls each, AT_ONCE at a time; what they returned, in order."""
    with ThreadPoolExecutor(AT_ONCE) as pool:
        return list(pool.map(lambda call: call(), calls))


def side_by_side(request, test_name: str, run_case: Callable[..., Any]) -> dict:
    """Runs every selected case of the parametrized test `test_name` (in the requesting module),
    AT_ONCE at a time, as `run_case(**its parameters)`; returns {case id: what it returned}. For a
    module fixture whose test then reads its case's result by `request.node.callspec.id`."""
    items = [item for item in request.session.items
             if getattr(item, "originalname", "") == test_name and item.module is request.module]
    results = at_once([lambda item=item: run_case(**item.callspec.params) for item in items])
    return {item.callspec.id: result for item, result in zip(items, results)}


@pytest.fixture
def tiny_config(tmp_path):
    """Makes a tiny config with changes merged into `TINY`; returns its path."""

    def make(**changes) -> Path:
        return write_config(tmp_path, merged(TINY, changes))

    return make


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_url(url: str, seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=5).read()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {seconds:.0f} s")


@dataclass(frozen=True)
class Server:
    url: str  # the tracking URI clients use
    store: str  # the server's own backend store, a sqlite URI


def start_mlflow_server(folder: Path) -> tuple[subprocess.Popen, Server]:
    """A real `mlflow server` on 127.0.0.1 in its own process group, answering."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--artifacts-destination", str(folder / "artifacts"), "--workers", "1"],
        cwd=folder, stdout=open(folder / "server.log", "w"), stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},  # its job runner: 10 s of a core after it answers
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_url(f"{url}/health", 120)
    except AssertionError:
        os.killpg(server.pid, signal.SIGKILL)
        raise
    wait_until_idle(server.pid, 60)
    return server, Server(url, f"sqlite:///{folder / 'mlflow.db'}")


def wait_until_idle(pid: int, timeout_s: float, share: float = 0.05) -> None:
    """Waits until a process tree uses under `share` of the machine's CPU over a second: a server
    still starting its workers (most of 2 cores for several seconds after it answers) is a load
    that advisor rightly refuses to verify beside."""
    import psutil

    def cpu() -> float:
        total = 0.0
        for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                pass
        return total

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        before = cpu()
        time.sleep(1.0)
        if cpu() - before < share * (os.cpu_count() or 1):
            return


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` on 127.0.0.1, for the whole run."""
    server, address = start_mlflow_server(tmp_path_factory.mktemp("mlflow-server"))
    try:
        yield address
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


# A tiny job stalled on storage: 3 ms per sample, read from latency.txt so that a test can make
# the storage fast without touching the code.
FETCH_STALLED = merged(TINY, {
    "workload": {"model": "broken:small_mlp", "dataset": "broken:file_latency_dataset", "batch_size": 16},
    "measure": {"steps": 8, "warmup_steps": 2},
    "search": {"recipes": "auto", "trials": 3, "verify_top": 1, "min_speedup": 1.2},
})


@dataclass(frozen=True)
class Session:
    config: Path
    result: subprocess.CompletedProcess
    results_dir: Path
    server: Server


@pytest.fixture(scope="session")
def optimized(tmp_path_factory, mlflow_server) -> Session:
    """One real `advisor optimize` of the fetch-stalled job, logged over HTTP to the MLflow server;
    shared by the optimize, browser and retune tests (the retune tests work on a copy)."""
    folder = tmp_path_factory.mktemp("optimized")
    (folder / "latency.txt").write_text("3.0")
    path = write_config(folder, merged(FETCH_STALLED, {"tracking": {"uri": mlflow_server.url}}))
    result = run_cli("optimize", str(path), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    return Session(path, result, Path(re.search(r"results: (\S+)", result.stdout).group(1)), mlflow_server)


# bf16 autocast needs the CPU's own bfloat16 arithmetic: without it oneDNN cannot build an LSTM's
# bf16 kernel, and the amp recipe does not apply (`recipes.amp.why_not`)
needs_bf16 = pytest.mark.skipif(not cpu_has_bf16(), reason="this CPU has no native bfloat16, so bf16 cannot be checked here")
