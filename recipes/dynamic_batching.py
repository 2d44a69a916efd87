"""Dynamic batching: requests that arrive close together are served as one call.

Under open-loop traffic a server that takes requests one by one queues them when they arrive
faster than one call returns; one call on a batch costs far less than the calls it replaces.
The batcher waits at most `max_wait_ms` for more requests after the first, up to `max_batch`.
"""

from __future__ import annotations

from typing import Optional

from advisor.recipes.base import Choice, Context, Recipe


def why_not(context: Context) -> Optional[str]:
    if not context.open_load:
        return "clients wait for each answer (closed load): there is no queue to batch; it applies to open load"
    if not context.batchable:
        return ("requests cannot be joined along their first dimension (a handler of yours, or tensors whose "
                "shapes differ past it)")
    return None


def space(context: Context) -> dict:
    return {"dynamic_batching.max_batch": Choice((1, 4, 8, 16, 32)),
            "dynamic_batching.max_wait_ms": Choice((0.0, 1.0, 2.0, 5.0))}


def snippet(plan: dict) -> str:
    size, wait = plan["dynamic_batching.max_batch"], plan["dynamic_batching.max_wait_ms"]
    return (
        "import queue, threading, time, torch\n"
        f"MAX_BATCH, MAX_WAIT_S = {size}, {wait / 1000}\n"
        "requests = queue.Queue()  # clients put (input, reply_queue); each input's first dimension is its rows\n"
        "def batcher():\n"
        "    while True:\n"
        "        batch = [requests.get()]\n"
        "        deadline = time.perf_counter() + MAX_WAIT_S\n"
        "        while len(batch) < MAX_BATCH and (left := deadline - time.perf_counter()) > 0:\n"
        "            try: batch.append(requests.get(timeout=left))\n"
        "            except queue.Empty: break\n"
        "        with torch.inference_mode():\n"
        "            outputs = model(torch.cat([x for x, _ in batch]))\n"
        "        for (_, reply), output in zip(batch, outputs.split([len(x) for x, _ in batch])):  # each its own rows\n"
        "            reply.put(output)\n"
        "threading.Thread(target=batcher, daemon=True).start()"
    )


RECIPE = Recipe(
    name="dynamic_batching",
    summary="serve requests that arrive together as one batched call (max batch, max wait)",
    targets=("under-batched", "tail"),
    risk="tolerance",  # a batched matmul sums in another order than one row's
    keys=("dynamic_batching.max_batch", "dynamic_batching.max_wait_ms"),
    why_not=why_not,
    space=space,
    snippet=snippet,
    textbook=lambda context: {"dynamic_batching.max_batch": 16, "dynamic_batching.max_wait_ms": 2.0},
    kinds=("infer",),
    hooks={"batching": lambda batching, plan: (plan.get("dynamic_batching.max_batch") or batching[0],
                                               (plan.get("dynamic_batching.max_wait_ms") or 0.0) / 1000)},
    idle=lambda plan: frozenset({"dynamic_batching.max_wait_ms"} if (plan.get("dynamic_batching.max_batch") or 1) == 1
                                else ()),  # a batcher's wait needs batches
    off={"dynamic_batching.max_batch": 1, "dynamic_batching.max_wait_ms": 0.0},
)
