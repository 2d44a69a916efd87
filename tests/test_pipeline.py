"""Pandas pipelines (`kind: pipeline`): the stage timings, the diagnosis with the user's source
line, the output comparison, chunked processing under a memory budget, and Dask for real:
a LocalCluster with 2 workers, and a `dask scheduler` plus `dask worker` started here."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import tables
from conftest import FIXTURES, free_port, run_cli, write_config

from advisor.harness import run_measurement
from advisor.kinds import baseline_plan, load_config
from advisor.kinds.pipeline.compare import compare_frames
from advisor.kinds.pipeline.loop import used_columns

PIPELINE = {
    "name": "tables",
    "workload": {"kind": "pipeline", "source": {"path": "sales.csv"}, "transform": "tables:total_by_key",
                 "partition_safe": True, "combine": "tables:combine_totals", "order_matters": False},
    "search": {"trials": 3, "verify_top": 1, "precision": 0},  # verdicts stop once clear (search.precision: test_verify)
}


def pipeline_config(folder: Path, rows: int = 20_000, **workload) -> Path:
    tables.write_sales(folder / "sales.csv", rows)
    config = json.loads(json.dumps(PIPELINE))
    config["workload"].update(workload)
    return write_config(folder, config)


def measure(path: Path, output: Path, mode: str = "full", **changes):
    config = load_config(path)
    return run_measurement(config, {**baseline_plan(config), **changes}, mode, 1, 120, output_path=output, fresh=True)


# ------------------------------------------------------------------ bad input


@pytest.mark.integration
def test_missing_source_is_a_clear_error(tmp_path):
    path = pipeline_config(tmp_path)
    (tmp_path / "sales.csv").unlink()
    result = run_cli("diagnose", str(path))
    assert result.returncode == 2, result.stderr
    assert "workload.source.path: no file matches" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()[-1]) > 20


@pytest.mark.integration
def test_chunking_forced_on_a_transform_that_is_not_partition_safe(tmp_path):
    path = pipeline_config(tmp_path, partition_safe=False)
    config = yaml_with(path, search={"recipes": ["chunked"], "trials": 2})
    result = run_cli("optimize", str(config))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "chunked cannot run here: it needs a partition-safe transform" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.integration
def test_transform_that_returns_no_frame_is_a_clear_error(tmp_path):
    path = pipeline_config(tmp_path, transform="tables:not_a_frame")
    result = run_cli("diagnose", str(path))
    assert result.returncode == 2, result.stderr
    assert "workload.transform: returned list, not a pandas DataFrame" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.integration
def test_a_train_recipe_on_a_pipeline_is_a_clear_error(tmp_path):
    path = yaml_with(pipeline_config(tmp_path), search={"recipes": ["compile"]})
    result = run_cli("optimize", str(path))
    assert result.returncode == 2 and "compile applies to train, distributed, infer and script workloads, not pipeline" in result.stderr


def yaml_with(path: Path, **sections) -> Path:
    import yaml

    config = yaml.safe_load(path.read_text())
    config.update(sections)
    path.write_text(yaml.safe_dump(config))
    return path


# ------------------------------------------------------------------ pure pieces


def test_used_columns_are_detected_by_dropping_each():
    sample = pd.DataFrame({"key": [1, 2, 1], "amount": [1.0, 2.0, 3.0], "unused": [7, 8, 9]})
    assert used_columns(sample, tables.total_by_key) == ["key", "amount"]


def test_compare_frames(tmp_path):
    base = pd.DataFrame({"key": [1, 2, 3], "amount": [1.0, 2.0, 3.0]})
    paths = {name: tmp_path / f"{name}.parquet" for name in ("base", "shuffled", "close", "changed")}
    base.to_parquet(paths["base"])
    base.iloc[::-1].reset_index(drop=True).to_parquet(paths["shuffled"])
    base.assign(amount=base.amount * (1 + 1e-12)).to_parquet(paths["close"])
    base.assign(amount=[1.0, 2.0, 3.5]).to_parquet(paths["changed"])
    assert compare_frames(str(paths["shuffled"]), str(paths["base"]), "exact", 1e-9, order_matters=False).passed
    assert not compare_frames(str(paths["shuffled"]), str(paths["base"]), "exact", 1e-9, order_matters=True).passed
    assert compare_frames(str(paths["close"]), str(paths["base"]), "exact", 1e-9, order_matters=True).passed
    changed = compare_frames(str(paths["changed"]), str(paths["base"]), "exact", 1e-9, order_matters=False)
    assert not changed.passed and "over the" in changed.note


class Planted:
    """What an attacker's pickle would run as it loads: here, a file made."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_planted_pickle_among_the_kept_outputs_is_never_unpickled(tmp_path):
    """A kept output is read as Parquet, which holds data and no code: a pickle put in its place
    (a journal entry pointing at it) fails the comparison, and runs nothing."""
    import pickle

    marker = tmp_path / "ran"
    planted = tmp_path / "planted.parquet"
    planted.write_bytes(pickle.dumps(Planted(str(marker))))
    pd.DataFrame({"a": [1.0]}).to_parquet(tmp_path / "base.parquet")
    found = compare_frames(str(planted), str(tmp_path / "base.parquet"), "exact", 1e-9, order_matters=True)
    assert not found.passed and "not a readable Parquet file" in found.note
    assert not marker.exists()


def test_objects_parquet_cannot_type_are_kept_as_the_text_they_are_compared_as(tmp_path):
    from advisor.frames import keep_frame, read_kept

    frame = pd.DataFrame({"mixed": [1, "two", None, (3, 4)], "x": [1.0, 2.0, 3.0, 4.0]})
    keep_frame(frame, tmp_path / "out.parquet")
    kept = read_kept(tmp_path / "out.parquet")
    mixed = kept["mixed"].tolist()
    assert [mixed[0], mixed[1], mixed[3]] == ["1", "two", "(3, 4)"] and pd.isna(mixed[2])
    assert kept["x"].tolist() == [1.0, 2.0, 3.0, 4.0]
    keep_frame(frame, tmp_path / "again.parquet")
    assert compare_frames(str(tmp_path / "out.parquet"), str(tmp_path / "again.parquet"), "exact", 1e-9, True).passed


# ------------------------------------------------------------------ harness and diagnosis


def test_stages_are_timed_and_output_kept(tmp_path):
    (tmp_path / "out").mkdir()  # a sink in a folder that does not exist is a config error
    path = pipeline_config(tmp_path, sink="out/totals.parquet")
    run = measure(path, tmp_path / "base.parquet")
    assert run.ok, run.reason
    assert run.samples == 20_000 and run.samples_per_s > 0
    assert {"read", "transform", "write"} <= set(run.stages) and run.stages["read"]["wall_s"] > 0
    assert list((tmp_path / "out").iterdir()) == [], "the write is timed into advisor's own run folder, never the user's sink"
    assert len(pd.read_parquet(tmp_path / "base.parquet")) == 50
    chunked = measure(path, tmp_path / "chunked.parquet", **{"pipeline.chunksize": 3_000})
    assert chunked.ok and chunked.stages["combine"]["wall_s"] > 0
    assert compare_frames(str(tmp_path / "chunked.parquet"), str(tmp_path / "base.parquet"), "tolerance", 1e-9, False).passed


@pytest.mark.integration
def test_rowwise_apply_is_diagnosed_with_its_line_and_vectorised_advice(tmp_path):
    path = pipeline_config(tmp_path, 60_000, transform="tables:rowwise", combine=None)
    result = run_cli("diagnose", str(path), "--json", "-q")
    assert result.returncode == 0, result.stderr
    assert "[1/2]" not in result.stderr, "-q: no progress lines"
    diagnosis = json.loads(result.stdout)
    assert diagnosis["bottleneck"] == "python", json.dumps(diagnosis["diagnoses"], indent=1)
    apply_line = next(i for i, line in enumerate((FIXTURES / "tables.py").read_text().splitlines(), 1) if ".apply(" in line)
    assert f"tables.py:{apply_line}" in diagnosis["diagnoses"][0]["summary"]
    text = run_cli("diagnose", str(path)).stdout
    assert "rewritten, to be measured" in text and "equal to the row-wise values on a sample" in text
    assert "np.where(frame['city'] == 'oslo', frame['amount'] * 1.2, frame['amount'])" in text


@pytest.mark.integration
def test_parse_bound_json_lines_are_diagnosed(tmp_path):
    tables.write_sales(tmp_path / "sales.jsonl", 60_000, fmt="jsonl")
    config = json.loads(json.dumps(PIPELINE))
    config["workload"]["source"] = {"path": "sales.jsonl"}
    result = run_cli("diagnose", str(write_config(tmp_path, config)), "--json")
    assert result.returncode == 0, result.stderr
    diagnosis = json.loads(result.stdout)
    assert diagnosis["bottleneck"] == "parse"
    seen = diagnosis["evidence"]["runs"]["profile"]["environment"]
    assert seen["used_columns"] == ["key", "amount"] and "city" in seen["category_columns"]
    assert seen["row_functions"] == [], "no row-wise code: nothing for the vectorise recipe to rewrite"


# ------------------------------------------------------------------ the loop, end to end


@pytest.mark.integration
def test_over_budget_pipeline_completes_under_the_budget_with_equal_output(tmp_path):
    path = pipeline_config(tmp_path, 700_000)
    budget = 160  # the whole frame takes about 185 MB here, a quarter of it at a time about 130 MB
    yaml_with(path, constraints={"max_memory_mb": budget}, search={"recipes": ["chunked"], "trials": 3, "verify_top": 1})
    unconstrained = measure(path, tmp_path / "whole.parquet")
    assert unconstrained.ok and unconstrained.peak_memory_mb > budget, unconstrained.peak_memory_mb
    result = run_cli("optimize", str(path), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads((Path(re.search(r"results: (\S+)", result.stdout).group(1)) / "recommendations.json").read_text())
    assert payload["unit"] == "rows/s" and payload["memory_fix"]
    top = payload["recommendations"][0]
    assert top["verified"] and top["recipes"] == ["chunked"] and top["peak_memory_mb"] <= budget
    assert top["numerics"]["passed"]
    assert measure(path, tmp_path / "chunked.parquet", **top["plan"]).ok
    assert compare_frames(str(tmp_path / "chunked.parquet"), str(tmp_path / "whole.parquet"), "tolerance", 1e-9, False).passed


@pytest.mark.integration
def test_dask_local_cluster_with_two_workers(tmp_path):
    path = pipeline_config(tmp_path, 40_000)
    assert measure(path, tmp_path / "base.parquet").ok
    run = measure(path, tmp_path / "dask.parquet", **{"pipeline.dask_workers": 2, "pipeline.dask_partitions": 4})
    assert run.ok, run.reason
    assert "cluster start" in run.stages and run.samples == 40_000
    assert compare_frames(str(tmp_path / "dask.parquet"), str(tmp_path / "base.parquet"), "tolerance", 1e-9, False).passed


@pytest.mark.integration
def test_dask_on_the_scheduler_the_config_names(tmp_path):
    from distributed import Client

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask_cli = str(Path(sys.executable).parent / "dask")
    processes = [
        subprocess.Popen([dask_cli, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True),
    ]
    try:
        time.sleep(2)
        processes.append(subprocess.Popen([dask_cli, "worker", address, "--nthreads", "1", "--no-dashboard"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(1, timeout=60)
            path = pipeline_config(tmp_path, 40_000, dask={"scheduler": address})
            assert measure(path, tmp_path / "base.parquet").ok
            run = measure(path, tmp_path / "dask.parquet", **{"pipeline.dask_workers": 1, "pipeline.dask_partitions": 4})
            assert run.ok, run.reason
            assert "cluster start" in run.stages
            assert compare_frames(str(tmp_path / "dask.parquet"), str(tmp_path / "base.parquet"), "tolerance", 1e-9, False).passed
            processed = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)
            assert processed > 0, "the partitions ran on the named cluster"
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)


@pytest.mark.integration
def test_the_users_sink_is_never_written(tmp_path):
    """A sink that exists beforehand is byte-identical after diagnose and optimize: every run
    writes the sink's format into advisor's own run folder instead (and times that write)."""
    path = pipeline_config(tmp_path, 20_000, sink="totals.parquet")
    yaml_with(path, search={"recipes": ["columns"], "trials": 2, "verify_top": 0})  # every run writes the same way
    sink = tmp_path / "totals.parquet"
    sink.write_bytes(b"the user's own results, from last night's run")
    before = sink.read_bytes()
    diagnosed = run_cli("diagnose", str(path), "--json")
    assert diagnosed.returncode == 0, diagnosed.stderr[-2000:]
    assert "write" in json.loads(diagnosed.stdout)["evidence"]["runs"]["full"]["stages"], "the write is still timed"
    optimized = run_cli("optimize", str(path), timeout=600)
    assert optimized.returncode == 0, optimized.stderr[-2000:]
    assert sink.read_bytes() == before
