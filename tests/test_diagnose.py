"""The diagnosis on stored measurements from this machine: fast, no child processes."""

import dataclasses
import json

import pytest
from conftest import FIXTURES

from advisor.diagnosis import diagnose, with_derived
from advisor.evidence import Evidence
from advisor.findings import THRESHOLDS, Thresholds, band
from advisor.kinds.train.derive import derive

PLANTED = {
    "quickstart": "input-fetch",
    "fetch_stall": "input-fetch",
    "prep_stall": "input-prep",
    "compute_bound": "compute",
    "memory_budget": "memory",
    "overhead": "overhead",
}


def stored(name: str) -> Evidence:
    return Evidence.from_dict(json.loads((FIXTURES / "evidence" / f"{name}.json").read_text()))


@pytest.mark.parametrize("name, bottleneck", PLANTED.items())
def test_planted_bottleneck_ranks_first(name, bottleneck):
    diagnoses = diagnose(stored(name))
    assert diagnoses[0].bottleneck == bottleneck
    assert diagnoses[0].severity == "high"
    assert diagnoses[0].evidence, "a diagnosis always carries its evidence"


def test_derived_quantities_are_recomputed_from_the_runs():
    evidence = stored("fetch_stall")
    assert with_derived(evidence).derived == pytest.approx(evidence.derived)
    derived = evidence.derived
    assert 0 < derived["stall_share"] < 1
    batch = 32  # configs/fetch_stall.yaml
    assert derived["fetch_ms_per_step"] == pytest.approx(
        batch * (derived["sample_wall_ms"] - derived["sample_cpu_ms"]), rel=1e-6
    )


def test_input_evidence_names_threshold_and_split():
    top = diagnose(stored("fetch_stall"))[0]
    metrics = {finding.metric: finding for finding in top.evidence}
    wait = metrics["exposed data-wait share"]
    assert wait.value >= THRESHOLDS.input_high and wait.threshold == THRESHOLDS.input_high
    assert metrics["fetch share of the input work (off-CPU)"].value > 0.5
    assert "dataloader" in top.fixes


def test_prep_stall_is_cpu_time_not_waiting():
    derived = stored("prep_stall").derived
    assert derived["sample_cpu_ms"] / derived["sample_wall_ms"] > 0.8
    assert derived["fetch_share_of_input"] < 0.5


def test_no_input_diagnosis_without_a_stall():
    for name in ("compute_bound", "overhead"):
        assert not any(d.bottleneck.startswith("input") for d in diagnose(stored(name)))


def test_memory_within_budget_is_not_diagnosed():
    evidence = dataclasses.replace(stored("memory_budget"), max_memory_mb=100_000)
    assert not any(d.bottleneck == "memory" for d in diagnose(evidence))


def test_memory_moderate_band():
    evidence = stored("compute_bound")
    peak = evidence.full.peak_memory_mb
    near = dataclasses.replace(evidence, max_memory_mb=peak / 0.95)
    memory = [d for d in diagnose(near) if d.bottleneck == "memory"]
    assert memory and memory[0].severity == "moderate"


def test_out_of_memory_failure_is_a_memory_diagnosis():
    evidence = stored("compute_bound")
    failed = dataclasses.replace(evidence.full, status="failed", reason="out of memory: can't allocate")
    diagnoses = diagnose(dataclasses.replace(evidence, full=failed))
    assert diagnoses[0].bottleneck == "memory" and diagnoses[0].severity == "high"


def test_thresholds_move_the_verdict():
    evidence = stored("quickstart")
    lenient = Thresholds(input_moderate=0.95, input_high=0.99)
    assert diagnose(evidence, lenient)[0].bottleneck != "input-fetch"


def test_band_edges():
    assert band(0.2, 0.05, 0.2) == "high"
    assert band(0.05, 0.05, 0.2) == "moderate"
    assert band(0.049, 0.05, 0.2) is None


def test_derive_needs_both_timing_runs():
    evidence = stored("quickstart")
    failed = dataclasses.replace(evidence.synthetic, status="failed", reason="crashed")
    assert derive(evidence.full, failed, evidence.cached) == {}
