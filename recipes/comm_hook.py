"""Gradient compression through a DistributedDataParallel communication hook.

`bf16_compress` and `fp16_compress` halve the bytes each step sends (each bucket cast down,
all-reduced, cast back); `powersgd_R` sends a rank-R factorisation of each gradient matrix,
with error feedback (what one step leaves out is added to the next) and warm start. The model
still trains, but on gradients that differ from the exact sum by rounding (the casts) or by an
approximation (PowerSGD): judged by the numerics gate against the job's own envelope.
"""

from __future__ import annotations

from typing import Any, Optional

from advisor.recipes.base import Choice, Recipe

HOOKS = ("bf16_compress", "fp16_compress", "powersgd_1", "powersgd_2", "powersgd_4")
POWERSGD_START_ITER = 2  # steps of plain all-reduce first (error feedback and warm start need at least 2)
# Gloo, with PowerSGD's all-reduces in flight for several buckets at once, mismatched their sizes
# between ranks and aborted (torch 2.13, two ranks); in one bucket they run in order.
ONE_BUCKET_MB = 1e6


def powersgd_rank(name: Optional[str]) -> int:
    return int(name.rsplit("_", 1)[1]) if isinstance(name, str) and name.startswith("powersgd_") else 0


def hook_of(name: Optional[str]) -> Optional[tuple[Any, Any]]:
    """(state, hook) for DistributedDataParallel.register_comm_hook; None for plain all-reduce."""
    if not name:
        return None
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if name == "bf16_compress":  # torch's own bf16 hook refuses every backend but NCCL; gloo reduces bf16
        return None, bf16_compress
    if name == "fp16_compress":
        return None, default_hooks.fp16_compress_hook
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=powersgd_rank(name),
                                        start_powerSGD_iter=POWERSGD_START_ITER, use_error_feedback=True,
                                        warm_start=True, random_seed=0)
    return state, powerSGD_hook.powerSGD_hook


def bf16_compress(process_group, bucket):  # unannotated: DDP checks a hook's annotations
    """fp16_compress_hook's cast, to bfloat16: each bucket halved, averaged, cast back."""
    import torch
    import torch.distributed as dist

    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(dist.get_world_size(group))
    future = dist.all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(done):
        buffer.copy_(done.value()[0])
        return buffer

    return future.then(decompress)


def one_bucket_for_powersgd(options: dict, plan: dict, backend: str = "gloo") -> dict:
    if powersgd_rank(plan.get("ddp.comm_hook")) and backend == "gloo":
        return {**options, "bucket_cap_mb": ONE_BUCKET_MB}
    return options


def snippet(plan: dict) -> str:
    name = plan["ddp.comm_hook"]
    if name == "fp16_compress":
        return ("from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
                "model.register_comm_hook(None, default_hooks.fp16_compress_hook)  # after DistributedDataParallel(model)")
    if name == "bf16_compress":
        return ("from recipes.comm_hook import bf16_compress  # or copy it: a cast, an all-reduce, a cast back\n"
                "model.register_comm_hook(None, bf16_compress)  # on NCCL, default_hooks.bf16_compress_hook does the same")
    return ("from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook\n"
            f"state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank={powersgd_rank(name)},\n"
            f"                                    start_powerSGD_iter={POWERSGD_START_ITER}, use_error_feedback=True, warm_start=True)\n"
            "model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)  # after DistributedDataParallel(model)\n"
            "# on gloo: DistributedDataParallel(model, bucket_cap_mb=1e6), one bucket (several abort there)")


RECIPE = Recipe(
    name="comm_hook",
    summary="compress gradients before they cross the network (bf16, fp16 or PowerSGD with error feedback)",
    targets=("network",),
    risk="tolerance",
    keys=("ddp.comm_hook",),
    why_not=lambda context: None,
    space=lambda context: {"ddp.comm_hook": Choice((None, *HOOKS))},
    snippet=snippet,
    textbook=lambda context: {"ddp.comm_hook": "bf16_compress" if context.cpu_bf16 or context.device == "cuda" else "fp16_compress"},
    kinds=("distributed",),
    # PowerSGD's own all-reduces replace the buckets' (and on gloo it runs in one bucket)
    idle=lambda plan: frozenset({"ddp.bucket_cap_mb"}) if powersgd_rank(plan.get("ddp.comm_hook")) else frozenset(),
    hooks={"comm_hook": lambda hook, plan: hook_of(plan.get("ddp.comm_hook")) or hook, "ddp": one_bucket_for_powersgd},
)
