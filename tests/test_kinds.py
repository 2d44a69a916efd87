"""Workload kinds behind one interface, and jobs of every shape: dict batches, models that
return `.loss`, the user's own step, optimizers from anywhere, Lightning modules."""

import re
import subprocess
import sys
from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import ROOT, config_path, run_cli, write_config

from advisor.harness import run_measurement
from advisor.harness.batches import batch_length, map_tensors, split_batch
from advisor.kinds import baseline_plan, load_config
from advisor.kinds.lightning.child import configured_optimizer

SHAPES = {
    "name": "shapes",
    "workload": {"model": "shapes:returns_loss", "dataset": "shapes:records", "batch_size": 8},
    "measure": {"warmup_steps": 1, "steps": 6, "profile_steps": 2, "timeout_s": 60},
    "search": {"precision": 0},  # verdicts stop once clear, for the suite's time (search.precision: test_verify)
}


def shaped(folder: Path, **workload) -> Path:
    return write_config(folder, {**SHAPES, "workload": {**SHAPES["workload"], **workload}})


def test_only_the_picker_names_a_kind():
    """Session, diagnosis, report, plan, fingerprint, CLI and harness call through the kind's
    interface: no module outside advisor/kinds and the config tests a kind's name."""
    offenders = []
    for path in (ROOT / "advisor").rglob("*.py"):
        if "kinds" in path.parts or path.name == "config.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(r"kind\s*(==|!=|in\s*\()|['\"](pipeline|train|lightning)['\"]\s*(==|!=)", line):
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert offenders == []


@dataclass
class Pair:
    x: torch.Tensor
    y: torch.Tensor


def test_batches_of_any_structure_split_and_count():
    Named = namedtuple("Named", "a b")
    batch = {"ids": torch.arange(10).reshape(5, 2), "extra": [Pair(torch.ones(5), torch.zeros(5, 3))],
             "scalar": torch.tensor(7.0), "name": "kept", "pair": Named(torch.ones(5), 3)}
    assert batch_length(batch) == 5
    doubled = map_tensors(batch, lambda t: t * 2)
    assert isinstance(doubled["extra"][0], Pair) and isinstance(doubled["pair"], Named)
    assert doubled["name"] == "kept" and float(doubled["scalar"]) == 14.0
    parts = split_batch(batch, 2)
    assert [batch_length(p) for p in parts] == [3, 2]
    assert torch.equal(torch.cat([p["ids"] for p in parts]), batch["ids"])
    assert parts[1]["extra"][0].y.shape == (2, 3)
    assert all(float(p["scalar"]) == 7.0 for p in parts)  # not batch-shaped: shared


def test_lightning_schedulers_step_as_lightning_steps_them():
    """configure_optimizers() in its shapes: the first optimizer, schedulers stepped per step
    (interval step) or per epoch, at their frequency."""
    model = torch.nn.Linear(2, 2)

    class Module:
        def __init__(self, conf):
            self.conf = conf

        def configure_optimizers(self):
            return self.conf(model)

    def step_schedule(opt):
        return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.5),
                                                    "interval": "step", "frequency": 2}}

    def epoch_schedule(opt):
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)]

    for conf, expected in ((step_schedule, 1.0 * 0.5 ** 3), (epoch_schedule, 1.0 * 0.5 ** 1)):
        optimizer, after_step = configured_optimizer(Module(lambda m: conf(torch.optim.SGD(m.parameters(), lr=1.0))),
                                                     steps_per_epoch=4)
        for _ in range(7):
            optimizer.step()
            after_step()
        assert optimizer.param_groups[0]["lr"] == pytest.approx(expected)


@pytest.mark.integration
def test_dict_batches_reach_a_model_that_returns_its_loss(tmp_path):
    """No loss and no step: the dict batch is called as keywords and `.loss` is the loss."""
    config = load_config(shaped(tmp_path, optimizer={"name": "torch.optim.AdamW", "lr": 0.01}))
    run = run_measurement(config, baseline_plan(config), "full", 6, 60)
    assert run.ok, run.reason
    assert len(run.losses) == 6 and run.losses[-1] < run.losses[0]
    assert run.environment["sample"].startswith("{features: float32[6]")


@pytest.mark.integration
def test_numerics_gate_works_through_the_users_step(tmp_path):
    """The user's step runs as written (same losses as advisor's own step on the same job);
    a plan that moves its losses beyond the tolerance is rejected there too."""
    from advisor.session.gate import compare_outputs

    config = load_config(shaped(tmp_path, step="shapes:plain_step", optimizer="shapes:build_sgd"))
    own = load_config(write_config(tmp_path, {**SHAPES, "workload": {**SHAPES["workload"],
                                                                     "optimizer": {"name": "SGD", "lr": 0.05}}},
                                   name="own.yaml"))
    base = run_measurement(config, baseline_plan(config), "full", 6, 60)
    assert base.ok, base.reason
    assert run_measurement(own, baseline_plan(own), "full", 6, 60).losses == pytest.approx(base.losses, rel=1e-3)
    bf16 = run_measurement(config, {**baseline_plan(config), "amp.dtype": "bfloat16"}, "full", 6, 60)
    assert bf16.ok, bf16.reason
    strict = load_config(write_config(tmp_path, {**SHAPES, "workload": {**SHAPES["workload"], "step": "shapes:plain_step"},
                                                 "constraints": {"loss_rtol": 1e-6}}, name="strict.yaml"))
    assert compare_outputs(base, base, "tolerance", strict).passed
    verdict = compare_outputs(bf16, base, "tolerance", strict)
    assert not verdict.passed and verdict.max_rel_diff > 1e-6


@pytest.mark.integration
def test_lightning_module_runs_its_own_step_on_its_loader(tmp_path):
    """training_step and configure_optimizers run; the loader's batch size is the baseline's;
    a plan with workers rebuilds the loader around the same dataset."""
    pytest.importorskip("lightning")
    config = load_config(write_config(tmp_path, {**SHAPES, "workload": {
        "kind": "lightning", "module": "shapes:lit_module", "datamodule": "shapes:lit_data",
        "datamodule_args": {"batch_size": 4}}}))
    base = run_measurement(config, baseline_plan(config), "full", 4, 60)
    assert base.ok, base.reason
    assert base.environment["loader"]["batch_size"] == 4 and base.samples == 4 * 4
    plan = baseline_plan(config, base.environment)
    assert plan["batch_size"] == 4 and plan["dataloader.num_workers"] == 0
    workers = run_measurement(config, {**plan, "dataloader.num_workers": 2, "dataloader.persistent_workers": True},
                              "full", 4, 60)
    assert workers.ok, workers.reason
    assert workers.losses[:4] == pytest.approx(base.losses, rel=1e-5)  # the same batches, in the same order


@pytest.mark.integration
def test_hugging_face_model_from_a_config_in_code(tmp_path):
    pytest.importorskip("transformers")
    config = load_config(config_path("hf_text"))
    run = run_measurement(config, {**baseline_plan(config)}, "synthetic", 3, 120)
    assert run.ok, run.reason
    assert all(loss == loss and loss > 0 for loss in run.losses)


BAD_SHAPES = [
    ({"step": "shapes:step_returns_nothing"}, "workload.step: the step returned NoneType; return the loss"),
    ({"model": "shapes:takes_inputs"}, "workload.model: its forward cannot take the dict batch ['features', 'labels']"),
]


@pytest.mark.integration
@pytest.mark.parametrize("changes, message", BAD_SHAPES, ids=["step-none", "dict-batch"])
def test_broken_shapes_are_one_line_and_exit_2(tmp_path, changes, message):
    path = write_config(tmp_path, {**SHAPES, "workload": {**SHAPES["workload"], **changes}})
    result = run_cli("diagnose", str(path), timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert message in lines[-1] and "Traceback" not in result.stderr, result.stderr[-2000:]


def test_a_users_dataloader_keeps_its_sampler_and_collate():
    from torch.utils.data import DataLoader, WeightedRandomSampler

    from advisor.kinds.train.child import unpack_loader

    data = list(range(10))
    sampler = WeightedRandomSampler([1.0] * 10, 10)
    dataset, kept, collate, shuffle = unpack_loader(DataLoader(data, sampler=sampler, collate_fn=sorted), False)
    assert dataset is data and kept is sampler and collate is sorted
    dataset, kept, collate, shuffle = unpack_loader(DataLoader(data, shuffle=True), False)
    assert kept is None and collate is None and shuffle is True
    assert unpack_loader(data, False) == (data, None, None, False)


def test_lightning_missing_is_one_line(monkeypatch):
    from advisor.errors import UserError
    from advisor.kinds.lightning.child import lightning_classes

    for name in ("lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    with pytest.raises(UserError, match=r"needs the lightning package; install it with pip install 'verified-advisor\[lightning\]'"):
        lightning_classes()


def test_lightning_fingerprint_covers_module_and_datamodule(tmp_path):
    from advisor.fingerprint import fingerprint

    config = load_config(config_path("lightning"))
    sources = fingerprint(config)["components"]["sources"]
    assert set(sources) == {"module", "datamodule"} and sources["module"]["file"] == "lit_classifier.py"
    assert "lightning" in fingerprint(config)["components"]


def test_lightning_module_without_training_step_is_named(tmp_path):
    """Raised where the child builds the job, as the errors above (which show the exit status)."""
    pytest.importorskip("lightning")
    from advisor.errors import UserError
    from advisor.kinds.lightning.child import load_lightning_job

    config = load_config(write_config(tmp_path, {**SHAPES, "workload": {
        "kind": "lightning", "module": "shapes:lit_without_step", "datamodule": "shapes:lit_data"}}))
    with pytest.raises(UserError, match=r"workload.module: NoStep has no training_step; define training_step"):
        load_lightning_job(config)()


def test_an_optimizer_path_that_does_not_import_is_named():
    """Raised where the child builds the job (the CLI cases above show such errors exit 2)."""
    from advisor.errors import UserError
    from advisor.kinds.train.child import optimizer_class

    with pytest.raises(UserError, match=r"workload.optimizer.name: 'nowhere.optim.Lion' does not import \(No module"):
        optimizer_class("nowhere.optim.Lion")
    assert optimizer_class("torch.optim.AdamW") is torch.optim.AdamW and optimizer_class("SGD") is torch.optim.SGD
    with pytest.raises(UserError, match=r"'Adamw' is not a torch.optim optimizer"):
        optimizer_class("Adamw")


@pytest.mark.integration
def test_a_pipeline_session_never_imports_torch():
    """A pandas-only user's advisor: the CLI, the session, the recipes, the pipeline kind and its
    harness load without torch."""
    code = ("import sys, advisor.cli, advisor.api, advisor.session, advisor.report, advisor.recipes, advisor.kinds.pipeline.loop, "
            "advisor.harness.vectorised; from advisor.kinds import kind_of; kind_of('pipeline'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout


def test_a_session_started_without_the_api_forks_runs_with_the_kind_imported(tmp_path):
    """A session called directly (the bench, a library user) sets what the fork server imports as
    `advisor.api` does: a training job's runs fork with torch._dynamo loaded (`torch.optim`
    imports it on first use: 1 s a run otherwise, inside the run); a pipeline's, which start new
    interpreters, import nothing more. Asked in a new interpreter: no fork server started before."""
    pipeline = write_config(tmp_path, {"name": "p", "workload": {"kind": "pipeline", "source": {"path": "x.csv"},
                                                               "transform": "tables:total_by_key"}}, "pipeline.yaml")
    script = (
        "import sys\n"
        "from advisor.harness import launch\n"
        "from advisor.kinds import load_config\n"
        "from advisor.session.optimize import preload_kind\n"
        "preload_kind(load_config(sys.argv[1]))\n"
        "print(','.join(launch._preload[len(launch.PRELOAD):]) or '-')\n")
    seen = [subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120, cwd=ROOT)
            for path in (shaped(tmp_path), pipeline)]
    assert [done.stdout.strip() for done in seen] == ["torch._dynamo", "-"], [done.stderr[-500:] for done in seen]
