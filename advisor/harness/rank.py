"""What each rank of a data-parallel measurement runs, started by torchrun on its node
(`advisor.harness.ranks` starts the nodes):

    python -m advisor.harness.torchrun ... -m advisor.harness.rank SPEC   (torchrun, ended at once)

SPEC is the run's spec as URL-safe base64 JSON, so that nothing but the command line has to
reach another machine. Each rank runs the training loop (`train.run`) with the model wrapped in
DistributedDataParallel and the data sharded by a DistributedSampler, under the same seeds.

Modes: those of the training loop, and `local`: the same steps with communication removed (a
comm hook that hands each bucket back as it is), the compute-alone ideal of the differential.

At the end the ranks gather their readings through the process group itself and rank 0 prints
the result on one line (`RESULT_MARK`) to its stdout, which travels back through any `launch`
prefix (ssh, srun, ip netns exec). A rank that fails prints its reason on one line
(`FAILED_MARK` or `INVALID_MARK`) to stderr and exits non-zero, and torchrun stops the others.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

RESULT_MARK = "ADVISOR-RANKS-RESULT "
FAILED_MARK = "ADVISOR-RANK-FAILED "
INVALID_MARK = "ADVISOR-RANK-INVALID "
PROBE_REPEATS = 2  # all-reduces of the gradients' size timed after the window: the link's achieved rate


def encode(spec: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(spec).encode()).decode()


def decode(text: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(text.encode()))


@dataclass
class Ranks:
    """This rank's part in the job (`train.Parallel`): DistributedDataParallel with the plan's
    settings and hook, and the rank's shard of the data."""

    rank: int
    world_size: int
    ddp_options: dict  # the user's DistributedDataParallel settings, the baseline's
    backend: str = "gloo"

    def wrap(self, model, device, plan: dict, mode: str):
        from torch.nn.parallel import DistributedDataParallel

        from advisor.recipes import applied

        options = applied("ddp", dict(self.ddp_options), plan, backend=self.backend)
        try:
            wrapped = DistributedDataParallel(model, device_ids=[device.index or 0] if device.type == "cuda" else None,
                                              **options)
        except (RuntimeError, ValueError, TypeError) as exc:
            from advisor.errors import UserError

            raise UserError(f"workload.model: DistributedDataParallel cannot wrap it ({str(exc).splitlines()[0][:200]}); "
                            "give it parameters that require gradients") from None
        if mode == "local":
            wrapped.register_comm_hook(None, keep_local_gradient)
        else:
            hook = applied("comm_hook", None, plan)
            if hook is not None:
                wrapped.register_comm_hook(*hook)
        return wrapped

    def sampler(self, dataset: Any):
        from torch.utils.data import DistributedSampler

        return DistributedSampler(dataset, num_replicas=self.world_size, rank=self.rank, shuffle=True, seed=0,
                                  drop_last=True)


def keep_local_gradient(state, bucket):  # unannotated: DDP checks a hook's annotations
    """A comm hook that communicates nothing: each rank steps on its own gradient."""
    import torch

    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def gradient_bytes(model) -> int:
    """What plain DDP all-reduces each step: every gradient, at its element size."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def probe_allreduce(numel: int, repeats: int = PROBE_REPEATS) -> float:
    """Seconds one all-reduce of `numel` float32 values takes, the fastest of `repeats`."""
    import torch
    import torch.distributed as dist

    buffer = torch.ones(numel, dtype=torch.float32)
    dist.all_reduce(buffer)  # the connection pairs are set up by the first
    fastest = float("inf")
    for _ in range(repeats):
        dist.barrier()
        started = time.perf_counter()
        dist.all_reduce(buffer)
        fastest = min(fastest, time.perf_counter() - started)
    return fastest


def combined(readings: list[dict], world_size: int, bytes_per_step: int, probe_s: float, mode: str) -> dict:
    """One measurement from every rank's: rank 0's losses and checksums; the job's rate, the
    global batch over the slowest rank's step; the communication readings. A pure function."""
    first = readings[0]
    slowest = min(readings, key=lambda r: r.get("samples_per_s", 0.0))
    fields = dict(first)
    # The ranks beside rank 0 on its machine are part of the measurement, not other processes.
    beside = sum(r.get("cpu_util", 0.0) for r in readings[1:] if r.get("_machine") == first.get("_machine"))
    fields.update(samples_per_s=world_size * slowest.get("samples_per_s", 0.0),
                  other_cpu_share=max(0.0, first.get("other_cpu_share", 0.0) - beside),
                  samples=sum(r.get("samples", 0) for r in readings),
                  **{key: slowest.get(key, 0.0) for key in ("step_ms_mean", "step_ms_p50", "step_ms_p95", "data_wait_share")})
    # Ring all-reduce: each rank sends 2(n-1)/n of the buffer (and receives as much).
    sent = 2 * (world_size - 1) / world_size * bytes_per_step
    communication = {
        "world_size": world_size,
        "rank_samples_per_s": [r.get("samples_per_s", 0.0) for r in readings],
        "slowest_rank": readings.index(slowest),
        "bytes_per_step": bytes_per_step,
    }
    if probe_s > 0:
        communication.update(probe_s=probe_s, bandwidth_mbit_s=8 * sent / probe_s / 1e6)
    if mode in ("full", "nudged"):
        checksums = [r.get("parameters") for r in readings]
        communication["parameters_identical"] = all(c == checksums[0] for c in checksums)
    fields["communication"] = communication
    return fields


def run_rank(config, spec: dict, rank: int, world_size: int) -> dict:
    from advisor.harness import train

    distributed = config.workload.distributed
    ranks = Ranks(rank, world_size, {"find_unused_parameters": distributed.find_unused_parameters,
                                     "bucket_cap_mb": distributed.bucket_cap_mb}, distributed.backend)
    build = config.workload.load_job(config)
    sizes: dict = {}

    def build_and_size():
        job = build()
        sizes["bytes"] = gradient_bytes(job.model)
        return job

    fields = train.run(config, build_and_size, spec["plan"], spec["mode"], spec["steps"], parallel=ranks)
    probe_s = probe_allreduce(sizes["bytes"] // 4) if spec["mode"] == "local" and world_size > 1 else 0.0
    from advisor.harness.lifetime import machine

    return {**fields, "_bytes": sizes["bytes"], "_probe_s": probe_s, "_machine": machine()}


def main(encoded: str) -> int:
    from advisor.harness.lifetime import die_with_parent

    die_with_parent()  # torchrun's agent is the parent: killed, it takes the ranks with it
    if os.getppid() == 1:  # orphaned before asking
        return 1
    spec = decode(encoded)
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    try:
        fields = run_spec(spec, rank, world_size)
    except BaseException as exc:  # noqa: BLE001 - reported on one line, then torchrun stops the others
        report_failure(exc, spec, rank)
        return 1
    if rank == 0:
        print(RESULT_MARK + json.dumps(fields), flush=True)
    return 0


def run_spec(spec: dict, rank: int, world_size: int) -> dict:
    import torch.distributed as dist

    from advisor.config import load_config
    from advisor.errors import UserError
    from advisor.kinds.train.section import TrainWorkload

    config = load_config(spec["config"], {"train": TrainWorkload}, "train")  # only a training job runs as ranks
    distributed = config.workload.distributed
    if distributed.backend == "nccl":
        import torch

        if not torch.cuda.is_available():
            raise UserError("workload.distributed.backend: nccl needs a CUDA device on every rank and none is visible "
                            "here; use backend: gloo on CPUs")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if distributed.backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ:
        interface = interface_toward(os.environ.get("MASTER_ADDR", "127.0.0.1"))
        if interface:
            os.environ["GLOO_SOCKET_IFNAME"] = interface
    dist.init_process_group(distributed.backend, timeout=datetime.timedelta(seconds=spec["timeout_s"]))
    try:
        own = run_rank(config, spec, rank, world_size)
        readings: list = [None] * world_size
        dist.all_gather_object(readings, own)
    finally:
        dist.destroy_process_group()
    fields = combined(readings, world_size, own["_bytes"], max(r["_probe_s"] for r in readings), spec["mode"])
    return {key: value for key, value in fields.items() if not key.startswith("_")}


def interface_toward(host: str) -> str:
    """The network interface this machine reaches `host` through ("" when it cannot tell).
    Gloo otherwise binds to the address its hostname resolves to, often loopback, which other
    machines (and other network namespaces) cannot reach."""
    import socket

    import psutil

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 9))  # UDP: nothing is sent, the kernel only picks the route
            local = probe.getsockname()[0]
    except OSError:
        return ""
    for name, addresses in psutil.net_if_addrs().items():
        if any(address.address == local for address in addresses):
            return name
    return ""


def report_failure(exc: BaseException, spec: dict, rank: int) -> None:
    from advisor.errors import UserError
    from advisor.harness.child import failure_reason

    if isinstance(exc, UserError):
        line = f"{INVALID_MARK}{spec['config']}: {exc}"
    else:
        import traceback

        traceback.print_exc()
        line = f"{FAILED_MARK}rank {rank}: {failure_reason(exc, spec.get('plan') or {})}"
    print(" ".join(line.split()), file=sys.stderr, flush=True)


if __name__ == "__main__":
    from advisor.harness.lifetime import exit_now

    exit_now(main(sys.argv[1]))
