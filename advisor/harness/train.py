"""The training loop the user runs, under a plan, in one of four modes.

Modes (the differential runs, after DS-Analyzer):
  full       the user's DataLoader over the user's dataset: fetch + prep + compute.
  cached     the samples computed once and held in memory, batched in the trainer: compute plus
             batching only. Computing them also probes each sample's wall and CPU time, which
             splits the per-sample cost into fetch (off-CPU: storage, network) and prep (on-CPU).
  synthetic  one batch reused on the device: compute only; its step time is the ideal.
  profile    the full pipeline under torch.profiler, for the operator table; never timed.
  nudged     full, its weights first moved by one unit in the last place each: how far rounding
             alone moves this job's trajectory (the numerics gate's envelope).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import resource
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Protocol

import psutil
import torch
from torch.utils.data import DataLoader, RandomSampler

from advisor.config import AdvisorConfig
from advisor.errors import UserError
from advisor.harness import batches
from advisor.harness.batches import batch_length, describe, split_batch
from advisor.harness.lifetime import die_with_parent
from advisor.harness.operators import STEP_LABEL, summarize_profile
from advisor.measure import (
    descendants_cpu_seconds,
    machine_busy_seconds,
    other_cpu_share,
    step_statistics,
    tree_memory,
)
from advisor.outputs import write_whole
from advisor.recipes import applied, around, chain, checkpointing, dataloader

PROGRESS_EVERY_S = 0.05  # how often the timed window reports its running rate to the parent

CACHED_BATCHES = 8  # batches held in memory by the cached run; enough to cycle through
PROFILE_WARMUP_STEPS = 2


def run(config: AdvisorConfig, build_job: Callable[[], "TrainJob"], plan: dict, mode: str, steps: int,
        progress: Optional[str] = None, parallel: Optional["Parallel"] = None,
        epoch_end_s: Optional[float] = None) -> dict:
    """Runs the loop and returns the measurement fields the child can see from inside; with
    `progress`, a file where the timed steps report their running rate (the parent may prune);
    with `parallel`, as one rank of a data-parallel job (`advisor.harness.rank`); with
    `epoch_end_s`, what an epoch's end costs this plan, timed by its earlier runs (`epoch_charge`)."""
    device, default_threads = prepare_process(config, plan)
    setup_start = time.perf_counter()
    job = build_job()
    plan = job.resolve(plan)
    check_dataset(job, plan["batch_size"])
    model = job.model
    if mode == "nudged":
        nudge_by_one_ulp(model.parameters(), config.measure.seed)
    environment = describe_environment(model, device, default_threads, job.dataset[0])
    environment["loader"] = {key: plan[key] for key in LOADER_KEYS}
    model = applied("model", model.to(device), plan)
    if parallel is not None:
        model = parallel.wrap(model, device, plan, mode)
    optimizer, after_step = job.make_optimizer(model)
    optimizer = applied("optimizer", optimizer, plan)
    model = applied("compiled", model, plan, in_place=job.compile_in_place)
    step = job_step(job, model, optimizer, after_step, device, plan)

    probe: dict = {}
    loader = None
    if mode == "synthetic":
        batches = repeat_one_batch(job, plan["batch_size"], device)
    elif mode == "cached":
        batches, probe = cached_batches(job, plan["batch_size"])
    else:
        loader = make_loader(job, plan, parallel.sampler(job.dataset) if parallel is not None else None)
        batches = cycle(loader)

    warmup = PROFILE_WARMUP_STEPS if mode == "profile" else config.measure.warmup_steps
    warmup_ms = []
    for _ in range(warmup):
        t0 = time.perf_counter()
        float(step(to_device(next(batches), device, plan)))
        warmup_ms.append(1000 * (time.perf_counter() - t0))
    setup_s = time.perf_counter() - setup_start
    common = {"device": device.type, "setup_s": setup_s, "warmup_ms": warmup_ms, "environment": environment}

    if mode == "profile":
        return {**common, "operators": profile_steps(step, batches, device, plan, steps)}

    as_trained = mode in ("full", "nudged")  # a rank's "local" run, without communication, is not
    before = parameter_checksums(model) if as_trained else None
    window = steady_steps(steps, plan) if as_trained else steps
    charged = mode == "full" and parallel is None and loader is not None and loader.num_workers > 0
    extend = whole_epochs(loader, config.measure.whole_epochs_s) if charged else None
    fields = timed_steps(step, batches, device, plan, window, checksum=(steps, model), progress=progress, extend=extend)
    window = len(fields["losses"])
    if before is not None and fields["parameters"]:  # a step that never updates them is no training step
        environment["parameters_changed"] = fields["parameters"] != before
    if charged and fields.get("samples_per_s"):
        # a rank stays out: its extra steps would wait on collectives the other ranks never join
        timed_s = fields["samples"] / fields["samples_per_s"]
        epoch = epoch_charge(job, loader, batches, step, device, plan, timed_s / window, warmup, window, epoch_end_s)
        if epoch:
            fields.update(epoch=epoch, samples_per_s=fields["samples"] / (timed_s + epoch["charged_s"]))
    fields.update(common, sample_probe=probe)
    if device.type == "cuda":
        fields.update(peak_memory_mb=torch.cuda.max_memory_allocated() / 2**20, memory_source="cuda max allocated")
    return fields


def epoch_charge(job: "TrainJob", loader: DataLoader, batches: Iterator, step: Callable, device: torch.device,
                 plan: dict, steady_s: float, warmup: int, window: int, known_end_s: Optional[float] = None) -> dict:
    """What the epochs' ends cost a window of `window` steps beyond the ones it crossed. At each
    epoch's end a loader's workers stop and start again (persistent ones reset) and their queue
    refills: a cost a long run pays once an epoch, which a window inside one epoch never sees.
    Measured once, after the window (`steady_s` a step), on a short epoch of its own
    (`epoch_end_s`), or taken as `known_end_s` where the plan's earlier runs timed it ("timed":
    False: on the quickstart's fix the timing costs more than its window); charged in the share
    of an epoch the window spans, less the ends it crossed. {} where the loader has no length
    (an iterable dataset: its epoch is its own)."""
    per_epoch = steps_per_epoch(loader)
    if per_epoch <= 0:
        return {}
    crossed = (warmup + window - 1) // per_epoch - max(warmup - 1, 0) // per_epoch  # ends before a timed step's batch
    share = window / per_epoch - crossed  # whole epochs in the window: their ends were timed, nothing to charge
    if abs(share) < 1e-9:
        return {"steps_per_epoch": per_epoch, "crossed": crossed, "charged_s": 0.0}
    if known_end_s is not None:
        return {"end_s": known_end_s, "steps_per_epoch": per_epoch, "crossed": crossed,
                "charged_s": known_end_s * share, "timed": False}
    batches.close()  # the window's epoch goes first, untimed, and with it its workers: they would share the
    loader._iterator = None  # cores and the memory; torch keeps persistent ones on the loader, as its _iterator
    end_s = epoch_end_s(job, plan, step, device, steady_s, min(per_epoch, steady_steps(1, plan)))
    return {"end_s": end_s, "steps_per_epoch": per_epoch, "crossed": crossed, "charged_s": end_s * share, "timed": True}


def epoch_end_s(job: "TrainJob", plan: dict, step: Callable, device: torch.device, steady_s: float, steps: int) -> float:
    """Seconds an epoch's start and end cost over `steady_s` a step: an epoch of `steps` batches
    (as many as the workers can have queued twice over, the refill) run whole, its workers
    started and, at its last batch, stopped; with persistent workers their reset, timed on a
    second epoch after a first of one batch a worker (what starts each of them). At least 0."""
    sampler = Shortened(RandomSampler(job.dataset, num_samples=steps * int(plan["batch_size"]),
                                      generator=torch.Generator().manual_seed(2)))
    short = make_loader(job, plan, sampler)
    if short.persistent_workers:
        sampler.limit = short.num_workers * int(plan["batch_size"])
        for _ in short:
            pass
        sampler.limit = None
    started = time.perf_counter()
    for batch in short:
        float(step(to_device(batch, device, plan)))
    return max(0.0, time.perf_counter() - started - steps * steady_s)


class Shortened(torch.utils.data.Sampler):
    """A sampler's indices, the first `limit` of them while `limit` is set: a loader's epoch made
    shorter without a new loader (whose persistent workers would be new too)."""

    def __init__(self, sampler: torch.utils.data.Sampler):
        self.sampler, self.limit = sampler, None

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(iter(self.sampler), self.limit)

    def __len__(self) -> int:
        return len(self.sampler) if self.limit is None else min(self.limit, len(self.sampler))


def nudge_by_one_ulp(parameters: Iterable[torch.Tensor], seed: int) -> None:
    """Moves every floating-point weight one representable step up or down (a seeded coin per
    element, drawn apart from the job's own random numbers): a change the size of one rounding."""
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in parameters:
            if parameter.is_floating_point():
                up = torch.rand(parameter.shape, generator=generator) < 0.5
                toward = torch.where(up, torch.tensor(float("inf")), torch.tensor(float("-inf"))).to(parameter.dtype)
                parameter.copy_(torch.nextafter(parameter, toward.to(parameter.device)))


def prepare_process(config: AdvisorConfig, plan: dict) -> tuple[torch.device, int]:
    """Seeds everything, sets the plan's thread count and picks the device; returns the device
    and torch's own thread count before the plan changed it."""
    seed_everything(config.measure.seed)
    default_threads = torch.get_num_threads()
    applied("process", None, plan)
    return pick_device(config.workload.device), default_threads


class Parallel(Protocol):
    """How one rank of a data-parallel job differs from a lone process (`advisor.harness.rank`)."""

    def wrap(self, model: torch.nn.Module, device: torch.device, plan: dict, mode: str) -> torch.nn.Module: ...

    def sampler(self, dataset: Any) -> Any: ...


LOADER_KEYS = ("batch_size", *dataloader.RECIPE.keys)  # what a user's own loader sets: the baseline's settings


@dataclass
class TrainJob:
    """The user's job as the loop needs it, whoever wrote it (advisor's builders, the user's own
    step, a Lightning module): the model, where the batches come from, how the optimizer is made
    and how one step computes its loss."""

    model: torch.nn.Module
    dataset: Any
    make_optimizer: Callable[[torch.nn.Module], tuple[Any, Callable[[], None]]]  # -> (optimizer, after each step)
    loss: Optional[Callable] = None  # loss(output, batch) for advisor's own forward
    forward: Optional[Callable[[torch.nn.Module, Any], torch.Tensor]] = None  # (model, batch) -> loss, in advisor's step
    step: Optional[Callable[[torch.nn.Module, Any, Any], Any]] = None  # the user's whole step -> loss
    step_key: str = "workload.step"
    collate: Optional[Callable] = None
    sampler: Any = None  # the user's own sampler; None: shuffled (or not) by the loader
    shuffle: bool = True
    loader: dict = field(default_factory=dict)  # the user's loader settings, for plan keys left None
    compile_in_place: bool = False  # compile the module itself (its own methods call self(...)), not a wrapper

    def resolve(self, plan: dict) -> dict:
        """The plan with the loader keys it leaves None taken from the user's own loader."""
        return {**plan, **{key: value for key, value in self.loader.items() if plan.get(key) is None}}


def job_step(job: TrainJob, model, optimizer, after_step, device: torch.device, plan: dict) -> Callable:
    """One step under the plan: the user's own step run as written inside autocast, or advisor's."""
    if job.step is None:
        return make_train_step(model, optimizer, job.loss, device, plan, forward=job.forward, after_step=after_step)
    forward_context = around("around_forward", plan, device_type=device.type)

    def step(batch: Any) -> torch.Tensor:
        with forward_context():
            loss = job.step(model, batch, optimizer)
        after_step()
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise UserError(f"{job.step_key}: the step returned {describe(loss)}; return the loss as a scalar tensor "
                            "(return loss, after optimizer.step())")
        return loss.detach().float()

    return step


QUEUE_MULTIPLE = 2  # timed steps per batch the DataLoader can hold ready


def whole_epochs(loader: DataLoader, most_s: float) -> Optional[Callable[[int, float], int]]:
    """For workers that start again each epoch: once the window's steps are timed (in `seconds`),
    the steps to time in all, so that the window spans whole epochs and times the ends it
    crosses, as a long run pays them, where that costs at most `most_s` more at the window's pace.
    Such workers start cold every epoch, and the steps after their start run slower for a while
    (a fetch-bound plan of 5 workers x 16 threads: 7-8 ms a step over its first 40, 4-6 ms after);
    a window of its first steps, charged an end timed against their pace (`epoch_charge`), read it
    18% under the plain loop over an epoch (docs/benchmarks.md). None where nothing is extended:
    persistent workers (they start once a run; their reset is charged), a loader without a length,
    or `most_s` 0."""
    per_epoch = steps_per_epoch(loader)
    if loader.persistent_workers or per_epoch <= 0 or most_s <= 0:
        return None

    def extend(done: int, seconds: float) -> int:
        whole = -(-done // per_epoch) * per_epoch  # whole epochs of steps: as many ends crossed as spanned
        return whole if (whole - done) * seconds / done <= most_s else done

    return extend


def steps_per_epoch(loader: DataLoader) -> int:
    """The batches of one epoch; 0 where the loader has no length (an iterable dataset: its epoch is its own)."""
    try:
        return len(loader)
    except TypeError:
        return 0


def steady_steps(steps: int, plan: dict) -> int:
    """At least twice the batches the workers can have queued: a shorter window is served from
    the queue they filled during warm-up, and measures the queue, not the steady rate."""
    return max(steps, QUEUE_MULTIPLE * applied("queued_batches", 0, plan))


def timed_steps(step: Callable, batches: Iterator, device: torch.device, plan: dict, steps: int,
                checksum: tuple[int, Any] = (0, None), progress: Optional[str] = None,
                extend: Optional[Callable[[int, float], int]] = None) -> dict:
    """Times each step, split into the wait for the batch, the host-to-device copy and the rest.
    `checksum` (steps, model): the model's parameter checksums after that many timed steps, a
    point every plan reaches whatever its window, for the numerics gate of exact recipes.
    `progress`: a file rewritten every PROGRESS_EVERY_S with the steps, samples and seconds so far.
    `extend`: asked once `steps` are timed, with their seconds, how many to time in all (`whole_epochs`)."""
    step_s, wait_s, transfer_s, losses = [], [], [], []
    events = DeviceEvents(device)
    move = mover(device, plan)  # resolved once: the loop runs it every step
    checksums: list = []
    samples = 0
    faults_start, checksum_faults = minor_faults(), 0
    cpu_start, window_start, wall_start = cpu_seconds(), time.time(), time.perf_counter()
    busy_start = machine_busy_seconds()
    reported = wall_start
    while len(losses) < steps:
        t0 = time.perf_counter()
        batch = next(batches)
        t1 = time.perf_counter()
        batch = move(batch)
        synchronize(device)
        t2 = time.perf_counter()
        events.start()
        loss = step(batch)
        events.end()
        losses.append(float(loss))  # .item() waits for the device, closing the step
        t3 = time.perf_counter()
        step_s.append(t3 - t0)
        wait_s.append(t1 - t0)
        transfer_s.append(t2 - t1)
        samples += batch_length(batch)
        if progress and t3 - reported >= PROGRESS_EVERY_S:
            reported = t3
            report_progress(progress, len(losses), steps, samples, t3 - wall_start)
        if len(losses) == checksum[0] and checksum[1] is not None:
            before_checksums = minor_faults()
            checksums = parameter_checksums(checksum[1])  # outside the step's timing, inside the window
            checksum_faults = minor_faults() - before_checksums
        if extend is not None and len(losses) == steps:
            steps, extend = max(steps, extend(steps, t3 - wall_start)), None
    wall = time.perf_counter() - wall_start
    cpu_used = cpu_seconds() - cpu_start
    others = other_cpu_share(machine_busy_seconds() - busy_start, cpu_used, wall)
    memory_end = tree_memory(os.getpid())  # workers are alive here, whenever the parent last sampled
    fields = step_statistics(step_s, wait_s, transfer_s, samples)
    fields.update(
        page_faults_per_step=(minor_faults() - faults_start - checksum_faults) / max(steps, 1),
        losses=losses,
        parameters=checksums,
        cpu_util=min(1.0, cpu_used / (wall * (psutil.cpu_count() or 1))),
        other_cpu_share=others,
        window=(window_start, time.time()),
        memory_end=memory_end.to_dict(),
        device_timing=events.summary(),
    )
    return fields


class DeviceEvents:
    """CUDA events around each step's compute, read once the window is over: the step as the
    device's own clock sees it, from the moment its first kernel could start to its last one's
    end. Nothing on the CPU."""

    def __init__(self, device: torch.device):
        self.pairs: list = []
        self.on = device.type == "cuda"

    def start(self) -> None:
        if self.on:
            self.pairs.append([torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)])
            self.pairs[-1][0].record()

    def end(self) -> None:
        if self.on:
            self.pairs[-1][1].record()

    def summary(self) -> dict:
        if not self.pairs:
            return {}
        torch.cuda.synchronize()
        compute_ms = [begin.elapsed_time(end) for begin, end in self.pairs]
        return {"compute_ms_mean": sum(compute_ms) / len(compute_ms), "steps": len(compute_ms), "clock": "CUDA events"}


def report_progress(path: str, done: int, steps: int, samples: int, seconds: float, best: Optional[float] = None) -> None:
    """The timed window so far, for the parent to read at any moment: written whole, then renamed.
    `best`: the most the run's objective can still end at, where the run alone can tell (a
    service's 1000 / p95 ms, from its latencies)."""
    write_whole(Path(path), json.dumps({"steps": done, "of": steps, "samples": samples, "seconds": seconds,
                                        **({"best": best} if best is not None else {})}))


def parameter_checksums(model: torch.nn.Module) -> list[list[float]]:
    """Per parameter tensor, its sum of squares and of absolute values: two positive numbers
    that any change in the tensor moves, compared within a relative tolerance."""
    return checksums_of(model.parameters())


def checksums_of(tensors: Iterable[torch.Tensor]) -> list[list[float]]:
    with torch.no_grad():
        return [[float(p.double().square().sum()), float(p.double().abs().sum())] for p in tensors]


def minor_faults() -> int:
    """This process's minor page faults so far: each a page the kernel had to map again, most often
    memory the C allocator handed back at a step's end and the next step touched anew."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def cpu_seconds() -> float:
    """CPU time of this process (high resolution) and of its workers (psutil's clock ticks)."""
    return time.process_time() + descendants_cpu_seconds(os.getpid())


def profile_steps(step: Callable, batches: Iterator, device: torch.device, plan: dict, steps: int) -> dict:
    """Profiles `steps` training steps; their batches are fetched first, so the profile (and its
    cost) covers the step alone: the input pipeline is what the timing runs measure."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    ready = [to_device(next(batches), device, plan) for _ in range(steps)]
    compute_s = 0.0
    with profile(activities=activities) as prof:
        for batch in ready:
            t0 = time.perf_counter()
            with record_function(STEP_LABEL):
                float(step(batch))
            compute_s += time.perf_counter() - t0
    summary = summarize_profile(prof.events(), steps, compute_s, on_cuda=device.type == "cuda")
    # Slowed by the profiler, so never a timing: kept to show what the profiler costs.
    summary["profiled_samples_per_s"] = sum(batch_length(b) for b in ready) / compute_s
    return summary


def make_train_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Optional[Callable], device: torch.device,
    plan: dict, forward: Optional[Callable] = None, after_step: Callable[[], None] = lambda: None,
) -> Callable:
    """One optimisation step as the user writes it, under the plan's recipes: a context around
    the forward (autocast), a loss scaler (float16), and micro-batches (above 1, the batch runs
    in parts whose size-weighted losses add up). `forward(model, batch) -> loss` replaces
    `loss_fn(model(batch[0]), batch)` (a Lightning module's training_step); `after_step` steps
    the schedulers."""
    model.train()
    scaler = applied("grad_scaler", None, plan, device_type=device.type)
    micro_batches = applied("micro_batches", 1, plan)
    forward_context = around("around_forward", plan, device_type=device.type)
    compute_loss = forward or default_forward(loss_fn)

    def forward_pass(batch: Any) -> torch.Tensor:
        with forward_context():
            loss = compute_loss(model, batch)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise UserError("workload.loss: the loss must return a scalar tensor; reduce it with .mean()")
        return loss

    def backward(loss: torch.Tensor) -> None:
        (loss if scaler is None else scaler.scale(loss)).backward()

    def update() -> None:
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
        after_step()

    def step(batch: Any) -> torch.Tensor:
        # Gradients are dropped first, as a training loop is written. Where they are dropped moves
        # the allocator's reuse of freed blocks, and with it the speed of each plan unevenly:
        # dropped just before backward instead, bf16 on a wide MLP ran 1.49x against 1.21x in the
        # same loop written the usual way (experiments/placement.py), a claim no user reproduced.
        optimizer.zero_grad(set_to_none=True)
        if micro_batches == 1:
            loss = forward_pass(batch)
            backward(loss)
            update()
            return loss.detach().float()
        total, length = 0.0, batch_length(batch)
        for part in split_batch(batch, micro_batches):
            loss = forward_pass(part) * (batch_length(part) / length)
            backward(loss)
            total = total + loss.detach().float()
        update()
        return total

    return step


def default_forward(loss_fn: Optional[Callable]) -> Callable[[torch.nn.Module, Any], torch.Tensor]:
    """advisor's own forward: a dict batch as keywords, anything else as `model(batch[0])`; the
    loss from `loss_fn(output, batch)`, else the output's `.loss` (Hugging Face models), else
    cross-entropy against `batch[1]`."""

    def forward(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        if isinstance(batch, Mapping):
            output = call_with_keywords(model, batch)
        else:
            output = model(batch[0])
        if loss_fn is not None:
            return loss_fn(output, batch)
        if isinstance(getattr(output, "loss", None), torch.Tensor):
            return output.loss
        if isinstance(batch, Mapping):
            raise UserError(f"workload.model: called with the dict batch, it returned {describe(output)} with no .loss; "
                            "pass labels in the batch, or set workload.loss or workload.step")
        if len(batch) < 2:
            raise UserError("workload.dataset: samples have no target at [1]; add one, or set workload.loss")
        return torch.nn.functional.cross_entropy(output, batch[1])

    return forward


def call_with_keywords(model: torch.nn.Module, batch: Mapping) -> Any:
    """`model(**batch)`, with a clear error when the model's forward cannot take those keys."""
    import inspect

    target = model._orig_mod if hasattr(model, "_orig_mod") else model
    try:
        inspect.signature(target.forward).bind(**batch)
    except TypeError as exc:
        raise UserError(f"workload.model: its forward cannot take the dict batch {sorted(batch)} as keywords ({exc}); "
                        "rename the batch keys to forward's arguments, or set workload.step") from None
    except ValueError:
        pass  # no signature to check: let the call speak
    return model(**batch)


def describe_environment(model: torch.nn.Module, device: torch.device, default_threads: int, sample: Any) -> dict:
    """What recipe selection and the fingerprint need to know, seen from inside the child."""
    return {
        "sample": [describe_tensor(item) for item in sample] if isinstance(sample, (tuple, list)) else describe(sample),
        "device": device.type,
        "default_threads": default_threads,
        "blocks": checkpointing.count_blocks(model),
        "batch_stat_layers": sum(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()),
        "parameters": sum(p.numel() for p in model.parameters()),
        "conv_layers": conv_layers(model),
        "torch": torch.__version__,
        **gpu_facts(device),
    }


def conv_layers(model: torch.nn.Module) -> int:
    return sum(isinstance(m, torch.nn.modules.conv._ConvNd) for m in model.modules())


def gpu_facts(device: torch.device) -> dict:
    """The GPU's name, compute capability and the job's own TF32 setting (recipe selection)."""
    if device.type != "cuda":
        return {"gpu_name": None}
    major, minor = torch.cuda.get_device_capability(device)
    return {"gpu_name": torch.cuda.get_device_name(device), "gpu_capability": float(f"{major}.{minor}"),
            "gpu_memory_mb": torch.cuda.get_device_properties(device).total_memory / 2**20,
            "tf32_already": tf32_allowed()}


def tf32_allowed() -> bool:
    """Whether float32 matmuls may use TF32 now; False where torch will not say (a job that set
    the newer fp32_precision setting makes the older flag raise)."""
    try:
        return bool(torch.backends.cuda.matmul.allow_tf32)
    except RuntimeError:
        return False


def default_loss(output: torch.Tensor, batch: Any) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(output, batch[1])


def check_dataset(job: TrainJob, batch_size: int) -> None:
    """The dataset contract: map-style and at least one batch long; with advisor's own forward
    and no collate, samples of (input tensor, target, ...) or dicts of tensors."""
    dataset = job.dataset
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise UserError(
            f"workload.dataset: the builder returned {type(dataset).__name__}; return a map-style torch Dataset"
        )
    if len(dataset) < batch_size:
        raise UserError(f"workload.dataset: {len(dataset)} samples is less than one batch of {batch_size}")
    if job.step is not None or job.collate is not None or job.forward is not None:
        return  # the user's code reads the batch: its structure is theirs
    sample = dataset[0]
    if isinstance(sample, Mapping):
        return
    if not isinstance(sample, (tuple, list)) or not sample or not isinstance(sample[0], torch.Tensor):
        raise UserError(
            f"workload.dataset: sample 0 is {describe_sample(sample)}; each sample must be a tuple (input tensor, "
            "target, ...) or a dict of tensors, or set workload.collate or workload.step"
        )
    if job.loss is None and len(sample) < 2:
        raise UserError("workload.dataset: samples have no target at [1]; add one, or set workload.loss")


def describe_tensor(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    return type(value).__name__


def describe_sample(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        inner = ", ".join(type(v).__name__ for v in value[:3])
        return f"a {type(value).__name__} of ({inner})"
    return f"a {type(value).__name__}"


def make_loader(job: TrainJob, plan: dict, sampler: Any = None) -> DataLoader:
    """The user's loader rebuilt under the plan: the same dataset, collate function and sampler
    (`sampler`: a rank's shard instead); only what the plan changes differs."""
    options: dict = applied("loader", {}, plan, cuda=torch.cuda.is_available())
    if options["num_workers"] > 0:
        options["worker_init_fn"] = die_with_parent  # a worker never outlives the run, even after SIGKILL
    if sampler is not None:
        options["sampler"] = sampler
    elif job.sampler is not None:
        options["sampler"] = job.sampler
    elif job.shuffle:
        # The order's own generator: the loader draws its workers' seed from `generator` once per
        # iterator, which persistent workers keep across epochs; drawn from one generator, every
        # epoch after the first would be shuffled differently with persistent workers than without.
        options.update(sampler=RandomSampler(job.dataset, generator=torch.Generator().manual_seed(0)),
                       generator=torch.Generator().manual_seed(1))
    if job.collate is not None:
        options["collate_fn"] = job.collate
    return DataLoader(applied("dataset", job.dataset, plan), batch_size=int(plan["batch_size"]), drop_last=True, **options)


def cycle(loader: DataLoader) -> Iterator:
    """Batches without end, epoch after epoch, as a long training run sees them."""
    while True:
        yield from loader


def collate_of(job: TrainJob) -> Callable:
    return job.collate or torch.utils.data.default_collate


def repeat_one_batch(job: TrainJob, batch_size: int, device: torch.device) -> Iterator:
    batch = to_device(collate_of(job)([job.dataset[i] for i in range(batch_size)]), device, {})
    while True:
        yield batch


def cached_batches(job: TrainJob, batch_size: int) -> tuple[Iterator, dict]:
    """Computes samples once (timing each for the fetch/prep probe) and serves them from memory."""
    dataset = job.dataset
    count = min(len(dataset), CACHED_BATCHES * batch_size)
    samples, wall_s, cpu_s = [], 0.0, 0.0
    for index in range(count):
        w0, c0 = time.perf_counter(), time.process_time()
        samples.append(dataset[index])
        wall_s += time.perf_counter() - w0
        cpu_s += time.process_time() - c0
    probe = {"samples": count, "wall_ms": 1000 * wall_s / count, "cpu_ms": 1000 * cpu_s / count}
    if count >= 2 * batch_size:
        probe.update(loading_overheads(samples, batch_size, collate_of(job)))
    loader = DataLoader(samples, batch_size=batch_size, shuffle=job.shuffle, num_workers=0, drop_last=True,
                        generator=torch.Generator().manual_seed(0), collate_fn=collate_of(job))
    return cycle(loader), probe


def loading_overheads(samples: list, batch_size: int, collate: Callable, batches: int = 6) -> dict:
    """The CPU a sample costs on top of its own load, by how it is loaded (the loader model's
    inputs, `advisor.loading`), both per sample: `dispatch_ms`, handing it to a pool thread that
    waits on it and back (fetch threads); `handoff_ms`, moving it in a collated batch from a
    worker process to the step's, as a DataLoader with one worker does over the cached samples
    (the step's side timed, the worker's taken as equal)."""
    from concurrent.futures import ThreadPoolExecutor

    items = batches * batch_size
    with ThreadPoolExecutor(8) as pool:
        start = time.process_time()
        list(pool.map(lambda index: time.sleep(0.0002) or index, range(items)))  # a short wait, as a fetch's
        dispatch_s = (time.process_time() - start) / items
    found = {"dispatch_ms": 1000 * dispatch_s}
    loader = DataLoader(samples[:items], batch_size=batch_size, num_workers=1, collate_fn=collate,
                        multiprocessing_context="fork")
    try:
        batches_in = iter(loader)
        next(batches_in)  # the worker started and warm
        worker_mb = unique_mb([w.pid for w in getattr(batches_in, "_workers", [])])
        start = time.process_time()
        received = sum(1 for _ in batches_in)
    except Exception:  # samples a worker cannot send: its plans fail on their own, not this probe
        return found
    finally:
        del loader
    return {**found, "handoff_ms": 2000 * (time.process_time() - start) / max(1, received * batch_size),
            **({"worker_mb": worker_mb} if worker_mb else {})}


def unique_mb(pids: list[int]) -> float:
    """The memory the processes hold alone (USS: pages no other process shares), in MB: what
    each more worker adds to a run's peak. 0 where it cannot be read."""
    try:
        return sum(psutil.Process(pid).memory_full_info().uss for pid in pids) / (1024 * 1024)
    except (psutil.Error, OSError):
        return 0.0


def to_device(batch: Any, device: torch.device, plan: dict) -> Any:
    return mover(device, plan)(batch)


def mover(device: torch.device, plan: dict) -> Callable[[Any], Any]:
    """What puts a batch on the device under the plan: its copy (asynchronous where the plan
    pins memory) and the layout it asks for (`batch` hooks)."""
    non_blocking, layout = applied("non_blocking", False, plan), chain("batch", plan)
    return lambda batch: layout(batches.to_device(batch, device, non_blocking=non_blocking))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def pick_device(setting: str) -> torch.device:
    if setting == "cuda" and not torch.cuda.is_available():
        raise UserError("workload.device: 'cuda' was asked for but no CUDA device is visible; use 'auto' or 'cpu'")
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass
