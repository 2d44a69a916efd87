"""A plain PyTorch training loop, written as a user writes it, with no advisor code in it.

    python -m experiments.plain_loop CONFIG [PLAN_JSON] [--late-zero-grad] [--split-always]

Applies a recommendation's plan by hand (DataLoader arguments, fetch threads, threads, autocast,
activation checkpointing, gradient accumulation, torch.compile; on a GPU also pinned memory with
asynchronous copies, float16 with its GradScaler, TF32, cuDNN autotuning, fused optimizer steps and
channels_last) and prints the timed steps' throughput as JSON. The reproduction
experiment runs it to check advisor's claims from outside advisor.
"""

import contextlib
import importlib.util
import json
import math
import resource
import sys
import time
from pathlib import Path

import torch
import yaml
from torch.utils.checkpoint import checkpoint


def load(ref: str, root: Path):
    file, name = ref.rsplit(":", 1)
    path = (root / file).resolve() if file.endswith(".py") else (root / (file.replace(".", "/") + ".py")).resolve()
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


class Segment(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = torch.nn.Sequential(*layers)

    def forward(self, x):
        return checkpoint(self.layers, x, use_reentrant=False)


def checkpoint_share(model: torch.nn.Sequential, share: float) -> torch.nn.Sequential:
    """Recomputes the first `share` of the layers in backward, in segments of about sqrt(n)."""
    layers = list(model)
    count = round(share * len(layers))
    size = max(1, round(math.sqrt(len(layers))))
    segments = [Segment(layers[i : min(i + size, count)]) for i in range(0, count, size)]
    return torch.nn.Sequential(*segments, *layers[count:])


def pasted_threaded_fetch() -> type:
    """The ThreadedFetch class exactly as the fetch_threads snippet gives it to a user to paste:
    the replay runs the user's copy, not advisor's own (`advisor.harness.fetching`)."""
    from advisor.recipes.fetch_threads import WRAPPER

    namespace = {"torch": torch}
    exec(WRAPPER, namespace)
    return namespace["ThreadedFetch"]


def prepare(workload: dict, plan: dict) -> torch.device:
    """The process as the user sets it up by hand before building anything: seeded, the plan's
    threads, TF32 and cuDNN autotuning set; the device the config asks for, CUDA where there is one."""
    torch.manual_seed(0)
    if plan.get("threads.intra_op"):
        torch.set_num_threads(plan["threads.intra_op"])
    if plan.get("tf32.enabled"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if plan.get("cudnn_benchmark.enabled"):
        torch.backends.cudnn.benchmark = True
    cuda = workload.get("device", "auto") != "cpu" and torch.cuda.is_available()
    return torch.device("cuda" if cuda else "cpu")


def backward_pass(model, optimizer, x, y, micro: int = 1, autocast=contextlib.nullcontext,
                  late_zero_grad: bool = False, split_always: bool = False, scaler=None):
    """One step up to the optimizer's: gradients dropped, the loss computed and backpropagated; the
    loss. At one micro-batch as most users write it, with no tensor of its own; past one, or with
    `split_always`, the batch split into micro-batches whose scaled losses add up. `scaler`:
    float16's GradScaler, which scales the loss before backward."""
    if micro == 1 and not late_zero_grad and not split_always:
        optimizer.zero_grad()
        with autocast():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        (loss if scaler is None else scaler.scale(loss)).backward()
        return loss
    if not late_zero_grad:
        optimizer.zero_grad()
    loss = 0.0
    for part_index, (xs, ys) in enumerate(zip(x.tensor_split(micro), y.tensor_split(micro))):  # accumulation, by hand
        with autocast():
            part = torch.nn.functional.cross_entropy(model(xs), ys) * (len(xs) / len(x))
        if late_zero_grad and part_index == 0:
            optimizer.zero_grad()
        (part if scaler is None else scaler.scale(part)).backward()
        loss = loss + part.detach()
    return loss


def main() -> None:
    arguments = [a for a in sys.argv[1:] if not a.startswith("--")]
    late_zero_grad = "--late-zero-grad" in sys.argv  # gradients dropped just before backward, not first
    # the accumulation loop even for one micro-batch, as this loop ran every step until 2026-11-27 (then
    # inside a disabled autocast where no dtype was set; now no context there): its
    # split views and scaled losses are small tensors made each step, which move where glibc places its
    # small blocks, and with that whether a step's freed gradients go back to the kernel (heap_state.py)
    split_always = "--split-always" in sys.argv
    config_path = Path(arguments[0]).resolve()
    plan = json.loads(Path(arguments[1]).read_text()) if len(arguments) > 1 else {}
    config = yaml.safe_load(config_path.read_text())
    workload, measure = config["workload"], config.get("measure", {})
    root = config_path.parent

    device = prepare(workload, plan)
    cuda = device.type == "cuda"
    dataset = load(workload["dataset"], root)(**workload.get("dataset_args", {}))
    model = load(workload["model"], root)(**workload.get("model_args", {}))
    if plan.get("checkpointing.share"):
        model = checkpoint_share(model, plan["checkpointing.share"])
    model = model.to(device)
    channels_last = bool(plan.get("channels_last.enabled"))
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    options = dict(workload.get("optimizer", {"name": "SGD", "lr": 0.01}))
    if plan.get("fused_optimizer.enabled"):
        options["fused"] = True
    optimizer = getattr(torch.optim, options.pop("name"))(model.parameters(), **options)
    if plan.get("compile.mode"):
        model = torch.compile(model, mode=plan["compile.mode"])

    workers = plan.get("dataloader.num_workers", workload.get("dataloader", {}).get("num_workers", 0))
    extra = {}
    if workers:
        extra = {"prefetch_factor": plan.get("dataloader.prefetch_factor") or 2,
                 "persistent_workers": bool(plan.get("dataloader.persistent_workers"))}
    pinned = cuda and bool(plan.get("dataloader.pin_memory"))
    extra["pin_memory"] = pinned
    threads = plan.get("dataloader.fetch_threads") or 1
    loader = torch.utils.data.DataLoader(pasted_threaded_fetch()(dataset, threads) if threads > 1 else dataset,
                                         batch_size=workload.get("batch_size", 32), shuffle=True,
                                         num_workers=workers, drop_last=True, **extra)
    dtype = getattr(torch, plan["amp.dtype"]) if plan.get("amp.dtype") else None
    autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else contextlib.nullcontext
    scaler = torch.amp.GradScaler("cuda") if cuda and plan.get("amp.dtype") == "float16" else None
    micro = plan.get("grad_accumulation.micro_batches") or 1
    warmup, steps = measure.get("warmup_steps", 5), measure.get("steps", 40)
    if workers:  # time the steady rate, not the queue the workers filled during warm-up
        steps = max(steps, 2 * workers * (extra.get("prefetch_factor") or 2))
        # and whole epochs: each epoch's end stops and restarts the workers (persistent ones
        # reset), a cost a long run pays once an epoch; a window of whole epochs pays it as often
        steps = math.ceil(steps / len(loader)) * len(loader)

    def batches():
        while True:
            yield from loader

    # the clock starts when the warm-up's last step ends, before the first timed batch is fetched:
    # started once that batch is in hand, a loop that waits on its input leaves one wait in `steps` untimed
    samples, timed = 0, 0
    started = time.perf_counter() if warmup == 0 else None
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for index, (x, y) in enumerate(batches()):
        x, y = x.to(device, non_blocking=pinned), y.to(device, non_blocking=pinned)
        if channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        loss = backward_pass(model, optimizer, x, y, micro, autocast, late_zero_grad, split_always, scaler)
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
        loss.item()  # waits for the step, as a loop that logs its loss does
        if index == warmup - 1:
            started, faults = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        if index >= warmup:
            samples += len(x)
            timed += 1
        if timed == steps:
            elapsed = time.perf_counter() - started  # before the loader shuts its workers down, at the loop's end
            break
    print(json.dumps({"samples_per_s": samples / elapsed,
                      "page_faults_per_step": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps}))


if __name__ == "__main__":
    main()
