"""Data-parallel training: ranks started by torchrun, evidence of the network, and every way a
rank or its launch goes wrong, with no process left behind.

The slow link is real: two network namespaces joined by a throttled veth pair
(tests/fixtures/netns.py); without root or iproute2 those tests skip, saying why.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import FIXTURES, ROOT, at_once, run_cli, write_config

sys.path.insert(0, str(FIXTURES))

from netns import processes_in, slow_link, unavailable  # noqa: E402

RANKS = {
    "name": "ranks",
    "workload": {"model": "ranks:model", "dataset": "ranks:dataset", "batch_size": 32, "threads": 1,
                 "optimizer": {"name": "SGD", "lr": 0.05},
                 "distributed": {"nodes": 1, "ranks_per_node": 2, "backend": "gloo"}},
    "measure": {"warmup_steps": 1, "steps": 4, "profile_steps": 2, "timeout_s": 60},
    "search": {"precision": 0},  # verdicts stop once clear, for the suite's time (search.precision: test_verify)
}
RANK_MARK = "advisor.harness.rank"


def config_with(folder: Path, **workload) -> Path:
    import copy

    config = copy.deepcopy(RANKS)
    distributed = workload.pop("distributed", {})
    config["workload"].update(workload)
    config["workload"]["distributed"].update(distributed)
    return write_config(folder, config)


def measure(path: Path, plan: dict | None = None, mode: str = "full", timeout_s: float = 60):
    from advisor.harness import run_measurement
    from advisor.kinds import baseline_plan, load_config

    config = load_config(path)
    return run_measurement(config, {**baseline_plan(config), **(plan or {})}, mode, config.measure.steps, timeout_s)


def rank_processes() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(RANK_MARK in part for part in process.info["cmdline"] or ()):
            found.append(process)
    return found


def assert_no_rank_left(within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while rank_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert rank_processes() == []


# ------------------------------------------------------------------ the config and pure parts


@pytest.mark.integration
@pytest.mark.parametrize("distributed, words", [
    ({"nodes": 0}, "workload.distributed.nodes: expected a number >= 1"),
    ({"nodes": 2}, "workload.distributed.rendezvous: missing; 2 nodes need an address on node 0"),
    ({"nodes": 2, "rendezvous": "10.0.0.1:29511"}, "workload.distributed.launch: missing"),
    ({"rendezvous": "node0"}, "workload.distributed.rendezvous: expected host:port"),
    ({"backend": "mpi"}, "workload.distributed.backend"),
])
def test_bad_distributed_settings_are_one_line_errors(tmp_path, distributed, words):
    process = run_cli("diagnose", str(config_with(tmp_path, distributed=distributed)), timeout=60)
    assert process.returncode == 2
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in process.stderr, process.stderr[-2000:]


def test_the_jobs_rate_is_the_global_batch_over_the_slowest_ranks_step():
    from advisor.harness.rank import combined

    readings = [
        {"samples_per_s": 100.0, "samples": 128, "step_ms_mean": 320.0, "losses": [1.0], "parameters": [[1.0, 2.0]],
         "cpu_util": 0.5, "other_cpu_share": 0.55, "_machine": "m"},
        {"samples_per_s": 80.0, "samples": 128, "step_ms_mean": 400.0, "losses": [1.1], "parameters": [[1.0, 2.0]],
         "cpu_util": 0.5, "other_cpu_share": 0.5, "_machine": "m"},
    ]
    fields = combined(readings, 2, 40_000_000, 0.8, "full")
    assert fields["samples_per_s"] == 160.0 and fields["step_ms_mean"] == 400.0
    assert fields["losses"] == [1.0]  # rank 0's, compared with the baseline's rank 0
    assert fields["other_cpu_share"] == pytest.approx(0.05)  # the other rank is part of the measurement
    communication = fields["communication"]
    assert communication["slowest_rank"] == 1 and communication["parameters_identical"] is True
    assert communication["bandwidth_mbit_s"] == pytest.approx(8 * 40_000_000 / 0.8 / 1e6)  # ring: n=2 sends it once
    readings[1]["parameters"] = [[1.0, 2.5]]
    assert combined(readings, 2, 40_000_000, 0.0, "full")["communication"]["parameters_identical"] is False


def test_a_compute_heavy_data_parallel_job_is_not_called_network_bound():
    from advisor.diagnosis import diagnose, with_derived
    from advisor.evidence import Evidence
    from advisor.measure import Measurement

    def run(mode: str, step_ms: float) -> Measurement:
        return Measurement(mode=mode, plan={}, status="ok", samples_per_s=64_000 / step_ms, step_ms_mean=step_ms,
                           communication={"world_size": 2, "bytes_per_step": 2_000_000, "rank_samples_per_s": [1, 1]})

    profile = Measurement(mode="profile", plan={}, status="ok")
    heavy = with_derived(Evidence(full=run("full", 105.0), local=run("local", 100.0), profile=profile, kind="distributed"))
    assert [d.bottleneck for d in diagnose(heavy)][:1] == ["compute"]
    slow = with_derived(Evidence(full=run("full", 400.0), local=run("local", 100.0), profile=profile, kind="distributed"))
    found = diagnose(slow)
    assert found[0].bottleneck == "network" and found[0].share == pytest.approx(0.75)
    assert "2.0 MB of gradients a step" in found[0].summary


# ------------------------------------------------------------------ ranks on this machine


@pytest.mark.integration
def test_two_ranks_train_one_model_and_a_compression_hook_keeps_it_one(tmp_path, monkeypatch):
    temp = tmp_path / "tmp"  # torchrun made a log folder there each run and left it
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    baseline = measure(config_with(tmp_path))
    assert baseline.ok, baseline.reason
    communication = baseline.communication
    assert communication["world_size"] == 2 and communication["parameters_identical"] is True
    assert communication["bytes_per_step"] == 4 * sum(p.numel() for p in __import__("ranks").model().parameters())
    assert len(baseline.losses) == 4 and baseline.samples_per_s > 0
    compressed = measure(config_with(tmp_path), {"ddp.comm_hook": "bf16_compress"})
    assert compressed.ok, compressed.reason
    assert compressed.losses != baseline.losses  # the gradients crossed the link in bf16
    assert compressed.communication["parameters_identical"] is True
    local = measure(config_with(tmp_path), mode="local")
    assert local.ok and local.communication["bandwidth_mbit_s"] > 0
    assert_no_rank_left()
    assert list(temp.glob("torchelastic_*")) == []  # (torch's compile cache, torchinductor_*, is meant to stay)


@pytest.mark.integration
def test_a_users_own_step_runs_on_every_rank_with_the_model_wrapped(tmp_path):
    run = measure(config_with(tmp_path, step="ranks:train_step"))
    assert run.ok, run.reason
    assert run.communication["world_size"] == 2 and run.communication["parameters_identical"] is True
    assert run.environment["parameters_changed"] is True


@pytest.mark.integration
def test_a_rank_that_raises_fails_the_run_with_its_reason_and_stops_the_others(tmp_path):
    run = measure(config_with(tmp_path, model="ranks:model_raising_on_rank_1"))
    assert not run.ok and "rank 1" in run.reason and "cannot build its model" in run.reason
    assert_no_rank_left()


@pytest.mark.integration
def test_a_rank_that_hangs_is_killed_at_the_time_limit_with_the_others(tmp_path):
    started = time.monotonic()
    run = measure(config_with(tmp_path, dataset="ranks:dataset_hanging_on_rank_1"), timeout_s=6)
    assert not run.ok and run.reason.startswith("hung: no result within the 6 s")
    assert time.monotonic() - started < 30
    assert_no_rank_left()


@pytest.mark.integration
def test_a_launch_prefix_that_fails_is_named(tmp_path):
    run = measure(config_with(tmp_path, distributed={"launch": "ip netns exec advisor-no-such-namespace"}))
    assert not run.ok and "launch (ip netns exec advisor-no-such-namespace)" in run.reason, run.reason
    assert_no_rank_left()


@pytest.mark.integration
def test_a_taken_rendezvous_port_nccl_without_gpus_and_an_unwrappable_model_are_one_line_errors(tmp_path):
    folders = [tmp_path / case for case in ("taken", "nccl", "frozen")]
    for folder in folders:
        folder.mkdir()
    with socket.socket() as holder:  # side by side (conftest's AT_ONCE): the question is the message, not a timing
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        paths = [config_with(folders[0], distributed={"rendezvous": f"127.0.0.1:{port}"}),
                 config_with(folders[1], distributed={"backend": "nccl"}),
                 config_with(folders[2], model="ranks:frozen_model")]
        taken, nccl, frozen = at_once([lambda path=path: run_cli("diagnose", str(path)) for path in paths])
    for process, words in ((taken, f"port {port} on 127.0.0.1 is already taken"),
                           (nccl, "nccl needs a CUDA device on every rank"),
                           (frozen, "DistributedDataParallel cannot wrap it")):
        errors = [line for line in process.stderr.splitlines() if line.startswith("advisor:")]
        assert process.returncode == 2, process.stderr[-2000:]
        assert len(errors) == 1 and words in errors[0] and "Traceback" not in process.stderr, process.stderr[-2000:]
    assert_no_rank_left()


# ------------------------------------------------------------------ a real slow link


@pytest.fixture(scope="module")
def link():
    why = unavailable()
    if why:
        pytest.skip(f"no slow link between namespaces: {why}")
    with slow_link(200) as made:
        yield made


def across(folder: Path, link, port: int = 29531) -> Path:
    return config_with(folder, model_args={"features": 256, "hidden": 1024, "depth": 2},
                       dataset_args={"features": 256},
                       distributed={"nodes": 2, "ranks_per_node": 1, "rendezvous": link.rendezvous(port),
                                    "launch": link.launch})


@pytest.mark.integration
def test_over_a_slow_link_the_diagnosis_says_network_with_the_links_bandwidth(tmp_path, link):
    process = run_cli("diagnose", str(across(tmp_path, link)), "--json", timeout=300)
    assert process.returncode == 0, process.stderr[-3000:]
    import json

    diagnosis = json.loads(process.stdout)
    first = diagnosis["diagnoses"][0]
    assert first["bottleneck"] == "network", first
    derived = diagnosis["evidence"]["derived"]
    assert derived["bytes_per_step"] == 4 * sum(p.numel() for p in __import__("ranks").model(256, 1024, 2).parameters())
    assert abs(derived["bandwidth_mbit_s"] / link.measured_mbit_s - 1) <= 0.25, (derived, link)
    assert processes_in(link.namespaces[0]) == [] and processes_in(link.namespaces[1]) == []


@pytest.mark.integration
def test_kill_9_of_advisor_mid_run_leaves_no_process_in_either_namespace(tmp_path, link):
    path = across(tmp_path, link, port=29541)
    advisor = subprocess.Popen([sys.executable, "-m", "advisor.cli", "diagnose", str(path)], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not all(processes_in(ns) for ns in link.namespaces) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(processes_in(ns) for ns in link.namespaces), "the ranks never started"
    time.sleep(2)  # past their start, into the steps
    os.kill(advisor.pid, signal.SIGKILL)
    advisor.wait()
    deadline = time.monotonic() + 10
    while any(processes_in(ns) for ns in link.namespaces) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [processes_in(ns) for ns in link.namespaces] == [[], []]
    assert_no_rank_left()


def test_bucket_sizes_tried_alone_are_reported_even_as_noise():
    from advisor.report import bucket_lines

    base_plan = {"ddp.bucket_cap_mb": 25.0, "ddp.comm_hook": None}

    def trial(size, rate, hook=None):
        return {"feasible": True, "plan": {**base_plan, "ddp.bucket_cap_mb": size, "ddp.comm_hook": hook},
                "measurement": {"samples_per_s": rate}}

    payload = {"baseline": {"plan": base_plan, "samples_per_s": 100.0},
               "trials": [trial(25.0, 100.0), trial(100.0, 103.0), trial(5.0, 99.0), trial(1.0, 300.0, "powersgd_1")]}
    (line,) = bucket_lines(payload)
    assert "5 MB 0.99x, 25 MB 1.00x, 100 MB 1.03x" in line and "within trial noise" in line
    assert bucket_lines({**payload, "trials": payload["trials"][:1]}) == []


def test_a_data_parallel_command_starts_no_fork_server(tmp_path, monkeypatch):
    """Its ranks start under torchrun: a fork server importing torch beside them took a core for
    3 s of their start. A single-process job's command still starts one."""
    import argparse

    from advisor.cli.commands import run_diagnose
    from advisor.cli.entry import warm_up_for
    from advisor.harness import launch

    started = []
    monkeypatch.setattr(launch, "warm_up", lambda preload=(): started.append(preload))
    warm_up_for(argparse.Namespace(command=run_diagnose, config=str(config_with(tmp_path))))
    assert started == []
    single = dict(RANKS, workload={k: v for k, v in RANKS["workload"].items() if k != "distributed"})
    warm_up_for(argparse.Namespace(command=run_diagnose, config=str(write_config(tmp_path, single, "single.yaml"))))
    assert len(started) == 1


@pytest.mark.integration
def test_the_torchrun_advisor_starts_gives_torchruns_exit_status():
    """advisor's torchrun ends the moment torchrun returns, with torchrun's own exit status."""
    def status(*args: str) -> int:
        return subprocess.run([sys.executable, "-m", "advisor.harness.torchrun", *args], cwd=ROOT,
                              capture_output=True, timeout=120).returncode

    assert status("--help") == 0
    assert status("--no-such-option") == 2
    assert status("--nproc-per-node=1", "--master-port=0", f"--log-dir={os.devnull}", "-m", "no_such_module_here") != 0
