"""The GPU's evidence, diagnosis and recipes, on recorded readings: the suite never needs a GPU.

The readings are NVML samples and profiler kernel times of the kind the device check recorded
(`python -m experiments.gpu_check`); the tests that run CUDA itself skip without one.
"""

import dataclasses
import json
import subprocess
import sys
import types

import pytest
import torch
from conftest import FIXTURES, ROOT, config_path

from advisor.advice import larger_batch, larger_batch_line
from advisor.diagnosis import diagnose
from advisor.evidence import Evidence
from advisor.failures import out_of_memory
from advisor.harness.child import failure_reason
from advisor.harness.operators import STEP_LABEL, summarize_profile
from advisor.kinds.train.derive import derive_gpu
from advisor.measure import Measurement, summarize_gpu
from advisor.recipes import Context, by_name

CUDA = torch.cuda.is_available()
GPU = Context(device="cuda", cores=16, default_threads=16, blocks=0, cpu_bf16=True, gpu_capability=9.0)
CPU = Context(device="cpu", cores=2, default_threads=2, blocks=0, cpu_bf16=True)


# ------------------------------------------------------------------ evidence, from recorded readings

def test_nvml_samples_are_summarized_over_the_timed_window_with_the_pcie_link():
    # (time, util %, memory MB, PCIe to the GPU MB/s, from it MB/s), one every 200 ms
    samples = [(10.0, 0.0, 900.0, 0.0, 0.0), (10.2, 35.0, 2100.0, 1200.0, 40.0), (10.4, 31.0, 2150.0, 1000.0, 20.0),
               (10.6, 90.0, 2200.0, 5.0, 1.0)]
    summary = summarize_gpu(samples, "NVIDIA H100 80GB HBM3", 81559.0, window=(10.1, 10.5))
    assert summary["util_mean"] == pytest.approx(33.0)
    assert summary["memory_mb_peak"] == 2150.0
    assert summary["pcie_to_gpu_mb_s"] == pytest.approx(1100.0) and summary["pcie_from_gpu_mb_s"] == pytest.approx(30.0)
    assert summary["memory_mb_total"] == 81559.0
    # a window shorter than the sampling interval: every sample, rather than none
    assert summarize_gpu(samples, "gpu", 1.0, window=(11.0, 11.1))["note"] == "4 NVML samples"
    # a driver that reads no PCIe throughput: utilisation and memory alone
    assert "pcie_to_gpu_mb_s" not in summarize_gpu([(1.0, 50.0, 10.0)], "gpu", 1.0)


def kernel(us: float):
    return types.SimpleNamespace(duration=us)


def event(name: str, start: float, end: float, kernels=(), device="DeviceType.CPU", parent=None):
    return types.SimpleNamespace(name=name, time_range=types.SimpleNamespace(start=start, end=end), kernels=list(kernels),
                                 device_type=device, cpu_parent=parent, cpu_time_total=end - start,
                                 self_cpu_time_total=end - start, device_time_total=sum(k.duration for k in kernels),
                                 self_device_time_total=sum(k.duration for k in kernels))


def test_the_profiles_kernel_time_counts_each_kernel_once_within_the_steps():
    """Two steps: each kernel hangs on the CPU operator that launched it; a kernel event of its
    own (device_type CUDA) and an operator outside the steps (the loader's) are not counted."""
    events = [
        event(STEP_LABEL, 0, 1000), event(STEP_LABEL, 2000, 3000),
        event("aten::mm", 10, 200, [kernel(300.0)]), event("aten::relu", 300, 350, [kernel(20.0), kernel(10.0)]),
        event("aten::mm", 2010, 2200, [kernel(300.0)]),
        event("void gemm_kernel", 20, 320, device="DeviceType.CUDA"),
        event("aten::copy_", 1500, 1600, [kernel(999.0)]),  # between the steps
    ]
    summary = summarize_profile(events, steps=2, compute_s=0.002, on_cuda=True)
    assert summary["device_ms_per_step"] == pytest.approx((300 + 30 + 300) / 1000 / 2)
    assert "device_ms_per_step" not in summarize_profile(events, steps=2, compute_s=0.002, on_cuda=False)


def measured(**fields) -> Measurement:
    return Measurement(mode=fields.pop("mode", "full"), plan={}, status="ok", device=fields.pop("device", "cuda"), **fields)


STARVED = measured(samples=2560, samples_per_s=2400.0, step_ms_mean=53.3, data_wait_share=0.64, transfer_share=0.03,
                   peak_memory_mb=1900.0, gpu={"available": True, "util_mean": 31.0, "memory_mb_total": 81559.0})
STARVED_PROFILE = measured(mode="profile", operators={"device_ms_per_step": 16.5, "ops_per_step": 180.0,
                                                      "substantial_op_share": 0.7, "us_per_op": 90.0, "top": []})


def test_the_gpus_step_is_charged_once_to_each_cause_and_the_shares_add_up():
    shares = derive_gpu(STARVED, STARVED_PROFILE)
    assert shares["gpu_busy_share"] == pytest.approx(16.5 / 53.3)
    assert shares["gpu_idle_input_share"] == 0.64 and shares["gpu_idle_transfer_share"] == 0.03
    total = sum(shares[k] for k in ("gpu_busy_share", "gpu_idle_input_share", "gpu_idle_transfer_share",
                                    "gpu_idle_launch_share"))
    assert total == pytest.approx(1.0)
    # kernel time read longer than the compute the host saw (profiler skew): capped, never above one
    over = derive_gpu(STARVED, dataclasses.replace(STARVED_PROFILE, operators={"device_ms_per_step": 50.0}))
    assert over["gpu_busy_share"] == pytest.approx(0.33) and over["gpu_idle_launch_share"] == pytest.approx(0.0, abs=1e-12)
    assert derive_gpu(dataclasses.replace(STARVED, device="cpu"), STARVED_PROFILE) == {}
    assert derive_gpu(STARVED, dataclasses.replace(STARVED_PROFILE, operators={})) == {}


def gpu_evidence(full: Measurement, profile: Measurement, synthetic_ms: float) -> Evidence:
    synthetic = measured(mode="synthetic", samples=2560, samples_per_s=128 * 1000 / synthetic_ms, step_ms_mean=synthetic_ms)
    cached = measured(mode="cached", samples=2560, samples_per_s=128 * 1000 / synthetic_ms, step_ms_mean=synthetic_ms)
    evidence = Evidence(full=full, profile=profile, synthetic=synthetic, cached=cached, kind="train")
    from advisor.kinds import kind_of

    return dataclasses.replace(evidence, derived=kind_of("train").derive(evidence))


def test_a_starved_gpu_is_named_with_its_numbers():
    diagnoses = diagnose(gpu_evidence(STARVED, STARVED_PROFILE, 18.0))
    first = diagnoses[0]
    assert first.bottleneck.startswith("input") and first.severity == "high"
    assert "the GPU is busy 31% of the step; 64% of the step waits on the next batch" in first.summary
    assert any(f.metric.startswith("GPU busy share") for f in first.evidence)
    compute = next(d for d in diagnoses if d.bottleneck == "compute")
    assert compute.share == pytest.approx(16.5 / 53.3), "compute is charged the GPU's kernel time, no more"


def test_a_gpu_idle_between_kernels_is_launch_bound_and_points_at_cuda_graphs():
    full = measured(samples=2560, samples_per_s=9000.0, step_ms_mean=14.2, data_wait_share=0.01, transfer_share=0.01,
                    gpu={"available": True, "util_mean": 40.0})
    profile = measured(mode="profile", operators={"device_ms_per_step": 3.1, "ops_per_step": 900.0,
                                                  "substantial_op_share": 0.3, "us_per_op": 15.0, "top": []})
    diagnoses = diagnose(gpu_evidence(full, profile, 14.0))
    first = diagnoses[0]
    assert first.bottleneck == "overhead" and first.severity == "high"
    assert first.share == pytest.approx(1 - 3.1 / 14.2 - 0.02)
    assert "between kernels" in first.summary and "compile" in first.fixes


def test_a_busy_gpu_is_compute_bound_and_lists_the_gpu_fixes():
    full = measured(samples=640, samples_per_s=420.0, step_ms_mean=76.0, data_wait_share=0.002, transfer_share=0.001)
    profile = measured(mode="profile", operators={"device_ms_per_step": 73.5, "ops_per_step": 400.0,
                                                  "substantial_op_share": 0.95, "us_per_op": 190.0, "top": []})
    first = diagnose(gpu_evidence(full, profile, 75.0))[0]
    assert first.bottleneck == "compute" and first.severity == "high"
    assert "the GPU is busy 97% of the step" in first.summary
    assert {"tf32", "amp", "fused_optimizer"} <= set(first.fixes)


def test_the_recorded_cpu_evidence_diagnoses_as_before():
    """Evidence without a GPU takes none of the GPU's paths."""
    evidence = Evidence.from_dict(json.loads((FIXTURES / "evidence" / "quickstart.json").read_text()))
    assert derive_gpu(evidence.full, evidence.profile) == {}
    assert "GPU" not in diagnose(evidence)[0].summary


def test_a_cuda_out_of_memory_error_is_an_infeasible_plan_not_a_crash():
    error = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                                   "79.19 GiB of which 1.06 GiB is free.")
    reason = failure_reason(error, {"amp.dtype": None})
    assert reason.startswith("out of memory: ")
    assert out_of_memory(Measurement.failed("full", {}, reason))


def test_a_larger_batch_is_advice_with_the_memory_it_would_use():
    # 25M parameters (about 380 MB of weights, gradients and moments), 4 GB at the peak, an 80 GB GPU
    found = larger_batch(128, 4000.0, 25_000_000, 81559.0)
    assert found["factor"] == 16 and found["batch_size"] == 2048
    assert found["memory_mb"] <= 0.9 * 81559.0 < found["memory_mb"] * 2
    line = larger_batch_line(found, 128)
    assert "2,048" in line and "not tried" in line and "learning rate" in line
    assert larger_batch(128, 60000.0, 1000, 81559.0) is None, "not even twice the batch fits"
    assert larger_batch(128, 0.0, 1000, 81559.0) is None


# ------------------------------------------------------------------ the GPU recipes

def test_gpu_recipes_say_why_not_off_the_gpu():
    for name in ("tf32", "cudnn_benchmark", "fused_optimizer"):
        assert "CUDA" in by_name(name).why_not(CPU) or "GPU" in by_name(name).why_not(CPU)
    assert by_name("channels_last").why_not(dataclasses.replace(CPU, conv_layers=4)).startswith("for training")
    assert by_name("channels_last").why_not(dataclasses.replace(CPU, conv_layers=4, kind="infer")) is None


def test_gpu_recipes_applicability_on_a_gpu():
    tf32 = by_name("tf32").why_not
    assert tf32(GPU) is None
    assert "7.5" in tf32(dataclasses.replace(GPU, gpu_capability=7.5))
    assert "already" in tf32(dataclasses.replace(GPU, tf32_already=True))
    cudnn = by_name("cudnn_benchmark").why_not
    assert "no convolution" in cudnn(GPU) and cudnn(dataclasses.replace(GPU, conv_layers=9)) is None
    fused = by_name("fused_optimizer").why_not
    assert "builds its own optimizer" in fused(GPU)
    assert fused(dataclasses.replace(GPU, optimizer="AdamW")) is None
    assert "no fused kernel" in fused(dataclasses.replace(GPU, optimizer="RMSprop"))
    assert by_name("channels_last").why_not(dataclasses.replace(GPU, conv_layers=4)) is None


def test_the_gpu_recipes_are_chosen_for_a_compute_bound_gpu_job():
    from advisor.session.planning import select_recipes

    context = dataclasses.replace(GPU, bottlenecks=("compute",), optimizer="AdamW", conv_layers=6)
    chosen, skipped = select_recipes("auto", context)
    assert {"tf32", "cudnn_benchmark", "fused_optimizer", "channels_last", "amp", "compile"} <= {r.name for r in chosen}
    amp_space = by_name("amp").space(context)["amp.dtype"].options
    assert "float16" in amp_space and "bfloat16" in amp_space
    assert "reduce-overhead" in by_name("compile").space(context)["compile.mode"].options


def test_a_fused_optimizer_is_the_same_optimizer_made_fused():
    """Built again before its first step, with its groups' settings; its step matches the
    unfused one (run on the CPU, where torch has fused Adam and SGD kernels too)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    twin = torch.nn.Linear(8, 4)
    twin.load_state_dict(model.state_dict())
    plain = torch.optim.AdamW(twin.parameters(), lr=0.01, weight_decay=0.1)
    made = by_name("fused_optimizer").hooks["optimizer"](torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1),
                                                         {"fused_optimizer.enabled": True})
    assert type(made) is torch.optim.AdamW and made.defaults["fused"] and made.param_groups[0]["weight_decay"] == 0.1
    x = torch.randn(16, 8)
    for net, optimizer in ((model, made), (twin, plain)):
        for _ in range(3):
            optimizer.zero_grad()
            net(x).square().mean().backward()
            optimizer.step()
    assert torch.allclose(model.weight, twin.weight, rtol=1e-5, atol=1e-6)
    stepped = torch.optim.SGD(model.parameters(), lr=0.1)
    model(x).sum().backward()
    stepped.step()
    stepped.state[model.weight]["momentum_buffer"] = torch.zeros(1)
    with pytest.raises(RuntimeError, match="before the first"):
        by_name("fused_optimizer").hooks["optimizer"](stepped, {"fused_optimizer.enabled": True})


@pytest.mark.integration
def test_channels_last_trains_on_nhwc_batches_and_tf32_sets_torchs_flags():
    batch = by_name("channels_last").hooks["batch"]((torch.randn(2, 3, 8, 8), torch.tensor([0, 1])),
                                                   {"channels_last.enabled": True})
    assert batch[0].is_contiguous(memory_format=torch.channels_last) and batch[1].tolist() == [0, 1]
    code = ("import torch; from recipes import applied; applied('process', None, {'tf32.enabled': True, "
            "'cudnn_benchmark.enabled': True}); print(torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark)")
    shown = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert shown.split() == ["True", "True"]


def test_the_autotune_cost_is_paid_back_like_a_compile():
    cost = by_name("cudnn_benchmark").one_off_cost
    runs = [measured(step_ms_mean=10.0, warmup_ms=(900.0, 10.0, 10.0))]
    reference = [measured(step_ms_mean=12.0)]
    found = cost(runs, reference, "step")
    assert found["seconds"] == pytest.approx(0.89) and found["paid_back_after"] == pytest.approx(445.0)


# ------------------------------------------------------------------ the device check, rehearsed

def test_the_device_checks_page_says_each_claim_against_its_plain_replay():
    from experiments.gpu_check import page

    rows = [{"job": "gpu_transformer", "about": "an encoder", "session_s": 120.0, "diagnoses": ["compute-bound: ..."],
             "report": ["throughput  420 samples/s on cuda"], "tried": ["tf32", "amp"], "skipped": {"dataloader": "x"},
             "device_timing": {"compute_ms_mean": 75.1, "steps": 20}, "first_verified_s": 70.0,
             "claim": {"changes": {"amp.dtype": "bfloat16"}, "speedup": 3.0, "interval": [2.8, 3.2]},
             "plain": {"speedup": 2.85, "interval": [2.7, 3.0], "rounds": 3, "error": 2.85 / 3.0 - 1}},
            {"job": "gpu_service", "about": "a service", "session_s": 50.0, "failed": "advisor optimize exited 1"}]
    text = page(rows, {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-27", "driver": "580", "torch": "2.11",
                       "cuda": "13.0", "python": "3.12", "cpus": 16})
    assert "| gpu_transformer | compute-bound: ... | amp.dtype=bfloat16 | 3.00x (2.80x-3.20x) | 2.85x" in text
    assert "-5.0% | yes |" in text and "NVIDIA H100 80GB HBM3" in text
    assert "The session failed: advisor optimize exited 1." in text


def test_the_device_check_rehearses_its_jobs_small_on_the_cpu(tmp_path):
    import yaml

    from advisor.kinds import load_config
    from experiments.gpu_check import JOBS, job_config

    for name in JOBS:
        config = load_config(job_config(name, "cpu", tmp_path))
        assert config.workload.device == "cpu" and config.workload.model.startswith("/")
        assert yaml.safe_load((config_path(name)).read_text())["workload"]["device"] == "cuda"


@pytest.mark.integration
def test_the_plain_service_serves_a_plan_by_hand(tmp_path):
    from experiments.gpu_check import job_config, replay

    config = job_config("gpu_service", "cpu", tmp_path)
    found = replay("infer", config, {"inference_mode.enabled": True, "compile.mode": None}, 2, tmp_path)
    assert len(found["ratios"]) == 2 and all(ratio > 0 for ratio in found["ratios"])


# ------------------------------------------------------------------ on a GPU only

@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_on_a_gpu_a_measurement_reads_cuda_events_and_nvml(tmp_path):
    from advisor.harness import run_measurement
    from advisor.kinds import load_config
    from experiments.gpu_check import job_config

    config = load_config(job_config("gpu_transformer", "cpu", tmp_path))
    config = dataclasses.replace(config, workload=dataclasses.replace(config.workload, device="cuda"))
    from advisor.kinds import kind_of

    run = run_measurement(config, {**kind_of("train").baseline_plan(config), "tf32.enabled": True}, "full", 5, 120)
    assert run.ok and run.device == "cuda" and run.device_timing["compute_ms_mean"] > 0
    assert run.gpu["available"] and run.environment["gpu_capability"] >= 7.0


# ------------------------------------------------------------------ recorded on an H100 (docs/gpu.md)

def recorded(name: str) -> Evidence:
    """The evidence the device check's `advisor diagnose --json` recorded on an NVIDIA H100
    (2026-11-27): NVML's samples, the profile's kernel times and the CUDA events, as read."""
    from advisor.diagnosis import with_derived

    return with_derived(Evidence.from_dict(json.loads((FIXTURES / "evidence" / f"{name}.json").read_text())))


def context_of(evidence: Evidence, config_name: str):
    from advisor.kinds import kind_of, load_config

    kind = kind_of(evidence.kind)
    diagnoses = diagnose(evidence)
    return kind.context(evidence, tuple(d.bottleneck for d in diagnoses if d.severity != "low"),
                        load_config(config_path(config_name)))


def test_the_recorded_image_job_starves_its_gpu():
    evidence = recorded("gpu_images")
    assert evidence.full.device == "cuda" and evidence.full.gpu["name"].startswith("NVIDIA")
    first = diagnose(evidence)[0]
    assert first.bottleneck == "input-prep"
    assert "the GPU is busy 7% of the step; 92% of the step waits on the next batch" in first.summary
    assert evidence.derived["gpu_busy_share"] == pytest.approx(
        evidence.profile.operators["device_ms_per_step"] / evidence.full.step_ms_mean)


def test_the_recorded_transformer_is_compute_bound_and_gets_the_gpu_fixes():
    from advisor.session.planning import select_recipes

    evidence = recorded("gpu_transformer")
    first = diagnose(evidence)[0]
    assert first.bottleneck == "compute" and first.severity == "high" and first.share > 0.9
    timing = evidence.full.device_timing
    assert timing["clock"] == "CUDA events"
    # the device's clock and the host's agree on the step's compute within a few percent
    host_ms = evidence.full.step_ms_mean * (1 - evidence.full.data_wait_share - evidence.full.transfer_share)
    assert timing["compute_ms_mean"] == pytest.approx(host_ms, rel=0.05)
    context = context_of(evidence, "gpu_transformer")
    assert context.gpu_capability == 9.0 and context.optimizer == "AdamW" and not context.tf32_already
    chosen, skipped = select_recipes("auto", context)
    assert {"amp", "tf32", "fused_optimizer", "compile"} <= {r.name for r in chosen}
    assert "allocator" in skipped and "GPU" in skipped["allocator"]


def test_the_recorded_service_is_launch_bound_and_compile_starts_from_cuda_graphs():
    evidence = recorded("gpu_service")
    names = [d.bottleneck for d in diagnose(evidence)]
    assert "overhead" in names
    context = context_of(evidence, "gpu_service")
    assert by_name("compile").textbook(context) == {"compile.mode": "reduce-overhead"}
    assert by_name("compile").textbook(dataclasses.replace(context, bottlenecks=("compute",))) == {"compile.mode": "default"}
