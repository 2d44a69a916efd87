"""The verifier: paired ratios, the bootstrap interval, numerics, and the A/A check."""

import math
import random

import pytest

from advisor.config import load_config
from advisor.harness import run_measurement
from advisor.plan import baseline_plan
from advisor.verify import bootstrap_interval, compare_losses, interleave, judge, step_breakdown
from conftest import TINY, merged, write_config


def test_interval_brackets_the_geometric_mean():
    ratios = [1.8, 2.1, 2.0, 1.9, 2.2]
    speedup, low, high = bootstrap_interval(ratios)
    assert low < speedup < high
    assert speedup == pytest.approx(math.exp(sum(map(math.log, ratios)) / 5))
    assert 1.8 <= low and high <= 2.2


def test_interval_widens_with_noise():
    _, tight_low, tight_high = bootstrap_interval([2.0, 2.01, 1.99, 2.0, 2.0])
    _, loose_low, loose_high = bootstrap_interval([1.2, 2.8, 1.6, 2.4, 2.0])
    assert loose_high - loose_low > 10 * (tight_high - tight_low)


def test_clear_speedup_is_verified_and_noise_is_not():
    assert judge("fast", [2.0, 2.2, 1.9, 2.1, 2.05], 1.05).verified
    noisy = judge("noise", [0.8, 1.3, 1.0, 1.2, 0.9], 1.05)
    assert not noisy.verified and "does not clear" in noisy.reason


def test_numerics_failure_blocks_verification():
    numerics = compare_losses([1.0, 0.5], [1.0, 0.9], "tolerance", 0.05)
    assert not numerics.passed and "differs" in numerics.note
    verdict = judge("fast but wrong", [2.0] * 5, 1.05, numerics)
    assert not verdict.verified and verdict.reason.startswith("numerics")


def test_numerics_tolerances_by_risk():
    assert compare_losses([1.0, 0.9], [1.0, 0.9], "exact", 0.05).passed
    assert not compare_losses([1.0, 0.92], [1.0, 0.9], "exact", 0.05).passed
    assert compare_losses([1.0, 0.92], [1.0, 0.9], "tolerance", 0.05).passed
    assert compare_losses([5.0], [1.0], "changes semantics", 0.05).passed
    assert not compare_losses([float("nan")], [1.0], "tolerance", 0.05).passed
    assert not compare_losses([], [1.0], "exact", 0.05).passed


def test_memory_fix_is_judged_on_the_budget():
    under = judge("ckpt", [0.8] * 5, 1.05, memory_fix=True, peaks_mb=[400, 420], max_memory_mb=450)
    over = judge("ckpt", [1.5] * 5, 1.05, memory_fix=True, peaks_mb=[400, 480], max_memory_mb=450)
    assert under.verified and not over.verified


def test_no_pairs_is_not_verified():
    assert not judge("crashed", [], 1.05).verified


def test_aa_on_synthetic_noise_verifies_rarely():
    """20% noise per run, no true effect: the lower bound clears 1.05x in at most 1 of 20."""
    rng = random.Random(7)
    verified = 0
    for _ in range(20):
        ratios = [rng.lognormvariate(0, 0.2) / rng.lognormvariate(0, 0.2) for _ in range(5)]
        verified += judge("A/A", ratios, 1.05).verified
    assert verified <= 1


@pytest.mark.integration
def test_aa_on_real_runs_verifies_at_most_once(tmp_path):
    """The baseline against itself, 20 times, on real child-process runs of a noisy tiny job.

    A live 20 x 5-pair A/A costs 200 runs; here 10 interleaved rounds (20 runs) are measured
    once and each A/A verification draws 5 of them, so the verifier sees real drift and noise.
    (`python -m experiments.calibrate` runs the live version.)
    """
    path = write_config(tmp_path, merged(TINY, {"workload": {"model": "broken:small_mlp"}}))
    config = load_config(path)
    plan = baseline_plan(config)
    rounds = interleave(plan, {"same": plan}, lambda p: run_measurement(config.path, p, "full", 6, 60), pairs=10)
    ratios = rounds.ratios("same")
    assert len(ratios) == 10
    rng = random.Random(0)
    verified = sum(judge("A/A", rng.sample(ratios, 5), config.search.min_speedup).verified for _ in range(20))
    assert verified <= 1
    assert step_breakdown(rounds.baseline)["compute"] > 0
