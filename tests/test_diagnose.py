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


# ------------------------------------------------------------------ each second charged once, no win left untried


@pytest.mark.parametrize("name", [*PLANTED, "gpu_images", "gpu_transformer"])
def test_each_second_of_the_step_is_charged_once(name):
    shares = [d.share for d in diagnose(stored(name)) if d.bottleneck != "memory"]
    assert sum(shares) <= 1.0 + 1e-6, shares
    assert shares == sorted(shares, reverse=True), "the largest share is named first"


def data_parallel(communication: float, substantial: float, data_wait: float = 0.0) -> Evidence:
    """A data-parallel job's evidence: the all-reduce waits `communication` of the step, and the
    profile, which times the whole step, sees `substantial` of it in substantial operators."""
    from advisor.measure import Measurement

    def run(mode: str, step_ms: float) -> Measurement:
        return Measurement(mode=mode, plan={}, status="ok", samples_per_s=64_000 / step_ms, step_ms_mean=step_ms,
                           data_wait_share=data_wait if mode == "full" else 0.0,
                           communication={"world_size": 2, "bytes_per_step": 38_000_000, "rank_samples_per_s": [1, 1]})

    operators = {"ops_per_step": 400, "us_per_op": 50.0, "substantial_op_share": substantial,
                 "top": [{"name": "aten::addmm", "calls_per_step": 4, "self_ms_per_step": 1.0, "share": 0.5}]}
    profile = Measurement(mode="profile", plan={}, status="ok", operators=operators)
    return with_derived(Evidence(full=run("full", 100 / (1 - communication)), local=run("local", 100.0),
                                 profile=profile, kind="distributed"))


def test_the_wait_on_the_all_reduce_is_charged_to_the_network_not_again_to_operator_overhead():
    found = diagnose(data_parallel(communication=0.83, substantial=0.15))
    assert [d.bottleneck for d in found][0] == "network"
    overhead = next(d for d in found if d.bottleneck == "overhead")
    assert overhead.share == pytest.approx(0.85 - 0.83, abs=0.01) and overhead.severity == "low"
    assert sum(d.share for d in found) <= 1.0 + 1e-6
    busy = diagnose(data_parallel(communication=0.25, substantial=0.10))  # overhead past the network's share
    assert [d.bottleneck for d in busy][:2] == ["overhead", "network"]
    assert next(d for d in busy if d.bottleneck == "overhead").share == pytest.approx(0.90 - 0.25, abs=0.01)


def test_page_faults_each_step_name_the_allocator():
    from advisor.session.planning import to_fix

    evidence = stored("compute_bound")
    faulting = dataclasses.replace(evidence, full=dataclasses.replace(evidence.full, page_faults_per_step=56_000))
    compute = next(d for d in diagnose(faulting) if d.bottleneck == "compute")
    assert compute.named == ("allocator",) and compute.fixes[0] == "allocator"
    assert any("page faults" in f.metric for f in compute.evidence)
    quiet = next(d for d in diagnose(evidence) if d.bottleneck == "compute")
    assert quiet.named == () and not any("page faults" in f.metric for f in quiet.evidence)
    assert "compute" in to_fix(diagnose(faulting))


def test_a_resume_says_again_that_its_diagnosis_was_taken_on_a_busy_machine():
    from advisor.session.planning import resuming_lines

    evidence = stored("quickstart")
    quiet = resuming_lines("quickstart", 3, evidence)
    assert quiet == ["resuming study 'quickstart' (3 trials done; the baseline's diagnosis is reused)"]
    busy = dataclasses.replace(evidence, full=dataclasses.replace(evidence.full, other_cpu_share=0.66))
    said = resuming_lines("quickstart", 3, busy)
    assert said[0] == quiet[0] and len(said) == 2
    assert "other processes took 66% of its CPU during the diagnosis (the full run)" in said[1]
    assert "`advisor optimize --fresh` diagnoses again" in said[1]
