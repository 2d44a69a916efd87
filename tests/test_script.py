"""`kind: script`: an unmodified training script, its steps found from outside, its folder untouched."""

import hashlib
import json
import re
from pathlib import Path

import pytest
from conftest import ROOT, needs_bf16, run_cli, write_config

pytestmark = pytest.mark.integration

# Written as people write scripts: argparse, tensors batched by hand, manual SGD (no optimizer
# object), a folder made and a checkpoint and a metrics file written as it goes.
SCRIPT = '''
import argparse, json, os, tempfile
import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--ask", action="store_true")
args = parser.parse_args()
if args.ask:
    input("learning rate? ")
torch.manual_seed(1)
data = torch.randn(256, 32)  # 4 steps an epoch: the window passes epoch ends, and their writes
target = (data[:, :4].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
os.makedirs("checkpoints", exist_ok=True)
for epoch in range(args.epochs):
    for i in range(0, len(data), 64):
        model.zero_grad()
        loss = nn.functional.cross_entropy(model(data[i:i + 64]), target[i:i + 64])
        loss.backward()
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.1)
    print(f"epoch {epoch} loss {loss.item():.4f}")
    torch.save(model.state_dict(), "checkpoints/model.pt")
    with tempfile.TemporaryDirectory() as export:  # removed by shutil.rmtree, relative to its folder's descriptor
        torch.save(model.state_dict(), os.path.join(export, "model.pt"))
    if os.path.exists("metrics.json"):
        os.replace("metrics.json", "metrics.prev.json")  # the user's own file, rotated
    with open("metrics.json", "w") as f:
        json.dump({"epoch": epoch, "loss": loss.item()}, f)
'''


def folder_digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def script_config(tmp_path: Path, args: list) -> Path:
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "metrics.json").write_text(json.dumps({"the user's": "own"}))  # the script overwrites it each epoch
    return write_config(tmp_path, {"name": "script", "workload": {"kind": "script", "script": "train.py", "args": args},
                                   "measure": {"warmup_steps": 2, "steps": 8}, "search": {"precision": 0}}, name="advisor.yaml")


def test_a_script_is_diagnosed_from_its_own_steps_and_its_folder_is_left_byte_identical(tmp_path):
    config = script_config(tmp_path, ["--epochs", "100"])
    before = folder_digest(tmp_path)
    result = run_cli("diagnose", str(config), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["diagnoses"][0]["bottleneck"] == "compute", report["diagnoses"]
    assert folder_digest(tmp_path) == before
    assert not (tmp_path / "checkpoints").exists(), "the script's new folder went to advisor's scratch"


@pytest.mark.parametrize("args, words", [
    (["--epochs", "0"], "ended on its own after no training step"),
    (["--epochs", "1", "--ask"], "reads standard input"),
])
def test_a_script_that_cannot_be_measured_is_one_line_and_exit_2(tmp_path, args, words):
    config = script_config(tmp_path, args)
    before = folder_digest(tmp_path)
    result = run_cli("diagnose", str(config))
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert [line for line in result.stderr.splitlines() if "error" in line] == [result.stderr.splitlines()[-1]]
    assert folder_digest(tmp_path) == before


def test_a_missing_script_is_named(tmp_path):
    config = write_config(tmp_path, {"name": "script", "workload": {"kind": "script", "script": "nowhere.py"}})
    result = run_cli("diagnose", str(config))
    assert result.returncode == 2 and "workload.script: nowhere.py not found" in result.stderr, result.stderr


def test_a_scripts_window_sees_the_other_processes_on_the_machine(tmp_path):
    """The busy-machine check reads each run's window: a script's run reports the CPU others took
    in it, and the diagnosis takes that run again once they stop (`measured_when_quiet`), keeping
    the quiet one."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    config = script_config(tmp_path, ["--epochs", "1000"])
    # a window past advisor's shortest readable one (0.5 s); one thread, so the step does not wait on a spinning peer
    config.write_text(config.read_text().replace("steps: 8", "steps: 1500").replace("kind: script", "kind: script\n  threads: 1"))
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    diagnose = subprocess.Popen([sys.executable, "-m", "advisor.cli", "diagnose", str(config), "--json"], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = []
    try:
        for line in diagnose.stderr:
            lines.append(line.rstrip())
            if "measured again once the machine is quiet" in line:
                break
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    out, err = diagnose.communicate(timeout=300)
    lines += err.splitlines()
    assert diagnose.returncode == 0, lines
    first = next(line for line in lines if "steps/s" in line)
    assert "other processes took" in first, lines
    full = json.loads(out)["evidence"]["runs"]["full"]
    assert full["other_cpu_share"] < 0.25, (full["other_cpu_share"], lines)


# word_language_model's main.py as a script: its model and corpus from a module beside it (the
# project's word_lm reference), the stream batchified by hand, SGD at lr 20 by hand with clipping,
# the hidden state carried over: a trajectory that amplifies rounding.
CHAOTIC = '''
import argparse
import torch
from word_lm import BPTT, MarkovCorpus, build_model

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=20.0)
args = parser.parse_args()
torch.manual_seed(0)
batch = 20
corpus = MarkovCorpus(40_000, 1000).corpus
stream = corpus[: len(corpus) // batch * batch].view(batch, -1).t().contiguous()
model = build_model()
model.train()
hidden = model.init_hidden(batch)
for i in range(0, stream.size(0) - 1 - BPTT, BPTT):
    data, target = stream[i:i + BPTT], stream[i + 1:i + 1 + BPTT].reshape(-1)
    hidden = tuple(h.detach() for h in hidden)
    model.zero_grad()
    output, hidden = model(data, hidden)
    loss = torch.nn.functional.cross_entropy(output, target)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-args.lr)
'''


@needs_bf16
def test_a_chaotic_script_is_judged_against_its_own_rounding_envelope(tmp_path):
    """The nudged run moves the parameters the script's gradients reach by one unit in the last
    place: rounding grows over the steps, so bf16 passes within that envelope; twice the
    learning rate does not."""
    from advisor.harness import run_measurement
    from advisor.kinds import baseline_plan, kind_of, load_config
    from advisor.session.gate import compare_outputs

    def config_with(lr: float):
        (tmp_path / "lm.py").write_text(CHAOTIC)
        (tmp_path / "word_lm.py").write_text((ROOT / "experiments" / "workloads" / "word_lm.py").read_text())
        return load_config(write_config(tmp_path, {"name": "lm", "workload": {"kind": "script", "script": "lm.py",
                                                   "args": ["--lr", str(lr)]},
                                                   "measure": {"warmup_steps": 2, "steps": 40}}, name=f"lm{lr}.yaml"))

    config = config_with(20.0)
    base = baseline_plan(config)
    run = lambda cfg, plan, mode="full": run_measurement(cfg, {**base, **plan}, mode, cfg.measure.steps, 300)  # noqa: E731
    baseline, bf16, other_rate = run(config, {}), run(config, {"amp.dtype": "bfloat16"}), run(config_with(40.0), {})
    assert baseline.ok and bf16.ok and other_rate.ok
    envelope = kind_of("script").envelope(config, baseline)
    assert envelope.amplifies, envelope.describe()
    assert compare_outputs(bf16, baseline, "tolerance", config, envelope).passed
    assert not compare_outputs(other_rate, baseline, "tolerance", config, envelope).passed


def test_the_fingerprint_covers_the_scripts_source(tmp_path):
    """A study made for one script's code is not resumed after the code changed."""
    from advisor.fingerprint import fingerprint
    from advisor.kinds import load_config

    config = load_config(script_config(tmp_path, []))
    before = fingerprint(config)["components"]["sources"]
    (tmp_path / "train.py").write_text(SCRIPT.replace("alpha=-0.1", "alpha=-0.2"))
    after = fingerprint(config)["components"]["sources"]
    assert before["script"]["file"] == "train.py" and before["script"]["sha256"] != after["script"]["sha256"]


def test_the_fingerprint_covers_the_modules_the_script_imports_from_its_folder(tmp_path):
    from advisor.fingerprint import fingerprint
    from advisor.kinds import load_config

    for name in ("lm_train.py", "lm_model.py"):
        (tmp_path / name).write_text((ROOT / "experiments" / "workloads" / "scripts" / name).read_text())
    config = load_config(write_config(tmp_path, {"name": "lm", "workload": {"kind": "script", "script": "lm_train.py"}}))
    before = fingerprint(config)["components"]["sources"]
    (tmp_path / "lm_model.py").write_text((tmp_path / "lm_model.py").read_text().replace("dropout=0.2", "dropout=0.3"))
    after = fingerprint(config)["components"]["sources"]
    assert set(before) == {"script", "module lm_model"}, before
    assert before["script"] == after["script"] and before["module lm_model"] != after["module lm_model"]


def advisor_in(folder: Path, *args: str):
    """The `advisor` command run from `folder`, as a user in their script's folder runs it."""
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "advisor.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=folder, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_a_scripts_command_line_after_two_dashes_needs_no_config(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "metrics.json").write_text("{}")
    before = folder_digest(tmp_path)
    result = advisor_in(tmp_path, "diagnose", "--json", "--", "python", "train.py", "--epochs", "100")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["workload"] == "train" and report["diagnoses"][0]["bottleneck"] == "compute", report
    assert folder_digest(tmp_path) == before


@pytest.mark.parametrize("args, words", [
    (["diagnose", "--", "python", "-m", "train"], "expected a script's command line, python SCRIPT.py"),
    (["diagnose", "--", "python", "elsewhere.py"], "elsewhere.py not found in"),
    (["diagnose"], "pass the path of a YAML config, or the script's command line after --"),
    (["schedule", "--", "python", "train.py"], "needs a config file; write one with workload.kind: script"),
    (["diagnose", "advisor.yaml", "--", "python", "train.py"], "not both"),
])
def test_a_bad_command_line_is_one_line_and_exit_2(tmp_path, args, words):
    (tmp_path / "train.py").write_text(SCRIPT)
    result = advisor_in(tmp_path, *args)
    assert result.returncode == 2 and words in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_recipes_that_would_change_the_scripts_code_say_so_and_the_loader_and_compile_need_their_calls():
    import dataclasses

    from advisor.recipes import Context
    from advisor.session.planning import select_recipes

    context = Context(device="cpu", cores=2, default_threads=2, blocks=4, cpu_bf16=True, kind="script",
                      bottlenecks=("input-fetch", "compute", "memory"))
    chosen, skipped = select_recipes("auto", context)
    assert "inside the script's code" in skipped["checkpointing"]
    assert skipped["dataloader"].startswith("the script builds no torch DataLoader"), skipped
    assert "no module to compile" in skipped["compile"], skipped
    seen = dataclasses.replace(context, loader_call=("train.py:9", "loader = DataLoader(data)"),
                               forward_call=("train.py:14", "loss = loss_fn(model(x), y)"))
    chosen, skipped = select_recipes("auto", seen)
    assert {"dataloader", "compile"} <= {recipe.name for recipe in chosen} and "compile" not in skipped


def test_autocast_spans_the_forward_and_the_loss_and_compile_applies_in_place(tmp_path):
    """Under amp, the loss computed from the model's output runs under autocast too, as the
    snippet's block has it, and the backward outside it; under compile, the outermost module
    the loss's gradients reach is compiled in place once they are known, and a frozen one is not."""
    import torch
    from torch import nn

    from advisor.kinds.script.loop import Steps, StepScope, compiling, forward_wrapped, steps_found
    from advisor.recipes import around

    plan = {"amp.dtype": "bfloat16", "compile.mode": "default"}
    record, seen = Steps(warmup=10, steps=10), {}
    frozen, model = nn.Linear(8, 8).requires_grad_(False), nn.Linear(8, 3)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    with StepScope(around("around_forward", plan, device_type="cpu")) as scope, steps_found(record, None, scope), \
            forward_wrapped(scope, compiling(plan, record, seen), tmp_path, seen):
        for step in range(2):
            output = model(frozen(x))
            loss = nn.functional.cross_entropy(output, y)
            assert output.dtype == torch.bfloat16 and loss.dtype == torch.float32  # upcast by autocast: inside it
            assert torch.is_autocast_enabled("cpu")
            loss.backward()
            assert not torch.is_autocast_enabled("cpu")
            assert seen.get("compiled", []) == ([] if step == 0 else ["Linear"]), seen
    assert getattr(model, "_compiled_call_impl", None) is not None and getattr(frozen, "_compiled_call_impl", None) is None
    assert len(record.losses) == 0 and len(record.ends) == 2


def test_a_scripts_warm_up_steps_are_timed_for_a_one_off_cost_its_first_step_left_out():
    """The first step holds the script's start-up; compile, applied after the first backward,
    lands in the second: the warm-up's steps after the first are what a one-off cost is read from."""
    from advisor.kinds.script.loop import Steps

    record = Steps(warmup=3, steps=2, ends=[10.0, 25.0, 25.1, 25.2, 25.3, 25.4])
    assert record.warmup_ms() == pytest.approx([15_000.0, 100.0, 100.0])
    assert record.step_seconds() == pytest.approx([0.1, 0.1])


def test_a_script_that_never_reaches_a_backward_is_stopped_in_one_line(tmp_path):
    (tmp_path / "serve.py").write_text("import time\nwhile True:\n    time.sleep(0.05)  # never trains\n")
    config = write_config(tmp_path, {"name": "idle", "workload": {"kind": "script", "script": "serve.py"},
                                     "measure": {"timeout_s": 12}}, name="advisor.yaml")
    result = run_cli("diagnose", str(config))
    assert result.returncode == 2, result.stderr
    assert "serve.py called no backward of a scalar loss in 2 s" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "hung" not in result.stderr


def test_a_scripts_dataloader_is_set_from_outside_verified_and_anchored_at_its_line(tmp_path):
    """cnn_train.py as a user wrote it: a DataLoader with its defaults (no workers) over images
    that wait on storage. advisor tells the wait from CPU work, sets the workers of every loader
    the script builds, verifies the fix, and anchors the snippet at the script's DataLoader line.
    The folder, with the metrics.json the script overwrites every epoch, is left byte-identical."""
    script = (ROOT / "configs" / "train.py").read_text()
    (tmp_path / "cnn_train.py").write_text(script)
    (tmp_path / "metrics.json").write_text(json.dumps({"the user's": "own"}))
    config = write_config(tmp_path, {
        "name": "cnn", "workload": {"kind": "script", "script": "cnn_train.py", "args": ["--epochs", "100", "--images", "256"]},
        "measure": {"warmup_steps": 2, "steps": 6},
        "search": {"recipes": ["dataloader"], "trials": 2, "verify_top": 1, "precision": 0}},  # the baseline and the textbook plan
        name="advisor.yaml")
    before = folder_digest(tmp_path)
    result = run_cli("optimize", str(config), "--json", "-q", timeout=600)
    assert result.returncode == 0, result.stderr
    ranking = json.loads(result.stdout)
    payload = json.loads((Path(ranking["results"]) / "recommendations.json").read_text())
    assert payload["diagnoses"][0]["bottleneck"] == "input-fetch", payload["diagnoses"]
    best = ranking["recommendations"][0]
    assert best["verified"] and best["plan"]["dataloader.num_workers"] > 0, best
    line = next(number for number, text in enumerate(script.splitlines(), 1) if "DataLoader(" in text and "=" in text)
    assert f"# cnn_train.py:{line}: loader = DataLoader(" in best["snippet"] and "num_workers=" in best["snippet"], best["snippet"]
    report = (Path(ranking["results"]) / "report.md").read_text()
    assert "## What the script wrote" in report and "own copy of the machine" in report, report
    assert f"- `{tmp_path}/metrics.json (" in report and f"- `{tmp_path}/runs/checkpoint.pt (" in report, report
    after = folder_digest(tmp_path)
    assert {name: after.get(name) for name in before} == before
    new = {name.split("/")[0] for name in set(after) - set(before)}
    assert new <= {"advisor-results", "mlflow.db", "mlruns", "cnn.optuna-journal"}, new  # advisor's own


def test_a_script_too_slow_for_its_window_is_stopped_saying_which_keys_to_raise(tmp_path):
    """A script of 2 s steps under a 60 s limit once waited the limit out, was called "hung" with
    no advice, and so did every later run. Two timed steps tell the window cannot end in time:
    one line, exit 2, the keys to change, well before the limit."""
    import time

    (tmp_path / "slow.py").write_text(
        "import time, torch\nw = torch.zeros(2, requires_grad=True)\n"
        "for _ in range(1000):\n    time.sleep(2.0)\n    (w.sum() * 2).backward()\n")
    config = write_config(tmp_path, {"name": "slow", "workload": {"kind": "script", "script": "slow.py"},
                                     "measure": {"timeout_s": 60, "warmup_steps": 2, "steps": 30}}, name="advisor.yaml")
    started = time.monotonic()
    result = run_cli("diagnose", str(config))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    line = result.stderr.strip().splitlines()[-1]
    assert re.search(r"slow\.py takes about 2\.\d s a step, so the 32 steps advisor times \(measure\.warmup_steps \+ "
                     r"measure\.steps\) need about \d+ s, past measure\.timeout_s 60 s: raise measure\.timeout_s to "
                     r"\d+ or more, or lower measure\.steps", line), line
    assert time.monotonic() - started < 40, "stopped after a few steps, not at the limit"
