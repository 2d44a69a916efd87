"""The numerics gate on jobs that test it, measured for real: a chaotic LSTM trained as
word_language_model's main.py trains (rounding grows thousands-fold within the timed steps, so
a fixed tolerance rejects every fix), and a regression whose answer lives in the low bits (where
bfloat16 destroys the answer and nothing grows). The gate must accept bf16 and compile on the
first, reject a changed learning rate there, and reject bf16 on the second."""

import math

import pytest
import torch
from conftest import ROOT, needs_bf16, write_config

from advisor.harness import run_measurement
from advisor.harness.train import nudge_by_one_ulp
from advisor.kinds import baseline_plan, kind_of, load_config
from advisor.session.gate import compare_outputs, judged
from advisor.verify import AMPLIFIED, ENVELOPE_MULTIPLE, EXACT_RTOL, Envelope, envelope_of

WORD_LM = ROOT / "experiments" / "workloads" / "word_lm.py"


def lstm_config(tmp_path, lr: float = 20.0, name: str = "config.yaml"):
    return load_config(write_config(tmp_path, {
        "name": "word_lm",
        "workload": {"kind": "train", "model": f"{WORD_LM}:build_model", "dataset": f"{WORD_LM}:build_dataset",
                     "step": f"{WORD_LM}:train_step", "optimizer": {"name": "SGD", "lr": lr}, "batch_size": 20},
        "measure": {"warmup_steps": 2, "steps": 40},
    }, name))


def runs_of(config, plans: dict[str, dict], mode: str = "full") -> dict:
    base = baseline_plan(config, None)
    return {name: run_measurement(config, {**base, **plan}, mode, config.measure.steps, 600) for name, plan in plans.items()}


@needs_bf16
def test_a_chaotic_job_accepts_bf16_and_compile_and_rejects_another_learning_rate(tmp_path):
    config = lstm_config(tmp_path)
    runs = runs_of(config, {"baseline": {}, "bf16": {"amp.dtype": "bfloat16"}, "compile": {"compile.mode": "default"}})
    nudged = runs_of(config, {"nudged": {}}, mode="nudged")["nudged"]
    other_rate = runs_of(lstm_config(tmp_path, lr=40.0, name="lr40.yaml"), {"lr40": {}})["lr40"]
    assert all(run.ok for run in [*runs.values(), nudged, other_rate])
    envelope = kind_of("train").envelope(config, runs["baseline"])
    assert envelope == envelope_of(nudged, runs["baseline"]), "the kind measures the envelope with a nudged run"
    assert envelope.amplifies, f"rounding grows {envelope.growth(len(envelope.losses) - 1):.0f}-fold"
    assert "this job amplifies rounding" in envelope.describe()

    base = runs["baseline"]
    for name in ("bf16", "compile"):
        within = compare_outputs(runs[name], base, "tolerance", config, envelope)
        assert within.passed, f"{name}: {within.note}"
    fixed = compare_outputs(runs["bf16"], base, "tolerance", config)
    widened = compare_outputs(runs["bf16"], base, "tolerance", config, envelope)
    assert widened.rtol > config.constraints.loss_rtol, "the tolerance widened where rounding grew"
    assert not fixed.passed or fixed.max_rel_diff > EXACT_RTOL, "bf16 moves this job's loss past float rounding"

    asked = []
    measured_once = lambda: asked.append(envelope) or envelope  # noqa: E731
    assert judged(runs["compile"], base, "tolerance", config, measured_once).passed and not asked, \
        "a candidate within the fixed tolerance never costs the envelope's run"
    assert judged(runs["bf16"], base, "tolerance", config, measured_once).passed and asked, "the gate asks for it"

    changed = compare_outputs(other_rate, base, "tolerance", config, envelope)
    assert not changed.passed, "twice the learning rate is a changed computation, chaos or not"
    assert "loss differs by" in changed.note


def test_an_answer_in_the_low_bits_rejects_bf16(tmp_path):
    config = load_config(write_config(tmp_path, {
        "name": "low_bits",
        "workload": {"kind": "train", "model": "numerics:low_bits_model", "dataset": "numerics:low_bits_dataset",
                     "loss": "numerics:low_bits_loss", "optimizer": {"name": "SGD", "lr": 0.01}, "batch_size": 64},
        "measure": {"warmup_steps": 2, "steps": 20},
    }))
    runs = runs_of(config, {"baseline": {}, "bf16": {"amp.dtype": "bfloat16"}, "threads": {"threads.intra_op": 1}})
    envelope = kind_of("train").envelope(config, runs["baseline"])
    assert not envelope.amplifies and max(envelope.losses) < 1e-3, "a float32 nudge barely moves it, and does not grow"
    bf16 = compare_outputs(runs["bf16"], runs["baseline"], "tolerance", config, envelope)
    assert not bf16.passed and bf16.max_rel_diff > 1.0, f"bf16 loses the answer: {bf16.max_rel_diff:.1%}"
    assert compare_outputs(runs["threads"], runs["baseline"], "tolerance", config, envelope).passed
    assert not judged(runs["bf16"], runs["baseline"], "tolerance", config, lambda: envelope).passed, \
        "asked for, an envelope that does not grow widens nothing"


def test_the_envelope_widens_only_where_rounding_grows():
    flat = Envelope(tuple([2e-7] * 20), parameters=1e-7)
    assert not flat.amplifies and flat.loss_tolerance(19, 0.05) == 0.05 and flat.parameter_tolerance(EXACT_RTOL) == EXACT_RTOL
    growing = Envelope(tuple(1e-7 * 2 ** step for step in range(20)), parameters=1e-3)
    assert growing.amplifies and growing.growth(19) == pytest.approx(2 ** 19)
    assert growing.loss_tolerance(0, 0.05) == pytest.approx(0.05 * ENVELOPE_MULTIPLE), "a step before growth: about fixed"
    assert growing.loss_tolerance(10, 0.05) == pytest.approx(0.05 * ENVELOPE_MULTIPLE * 2 ** 10)
    assert growing.growth(99) == growing.growth(19), "a step past the envelope's window keeps its last width"
    just_under = Envelope((1e-7, 1e-7 * (AMPLIFIED - 1)), parameters=0.0)
    assert not just_under.amplifies


def test_a_nudge_moves_every_weight_by_one_unit_in_the_last_place():
    model = torch.nn.Linear(64, 32)
    before = [p.detach().clone() for p in model.parameters()]
    nudge_by_one_ulp(model.parameters(), seed=0)
    for old, new in zip(before, model.parameters()):
        spacing = torch.nextafter(old.abs(), torch.tensor(math.inf)) - old.abs()
        assert torch.equal((new - old).abs(), spacing), "exactly one representable step each"
        assert 0.3 < float((new > old).float().mean()) < 0.7, "up or down by a coin"
