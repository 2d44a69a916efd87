"""Model instances: N copies of the model serving requests side by side.

On a CPU one call rarely keeps every core busy: small operators leave threads idle, and Python
between operators runs on one. N instances, each with the cores split between them (instances
x intra-op threads <= cores), answer N requests at once: the knob TorchServe's workers and
Triton's instance groups turn. Threads share one process (torch releases the GIL inside its
operators); processes (forked, as TorchServe's workers) overlap Python too but pickle each
request and answer. Both are searched; each copy's memory counts against the budget (measured
over the process tree). It combines with dynamic batching: each instance takes its own batch.
"""

from __future__ import annotations

from typing import Optional

from advisor.recipes.base import Choice, Context, Recipe

COUNTS = (2, 3, 4, 6, 8)


def why_not(context: Context) -> Optional[str]:
    if context.cores < 2:
        return "one core: instances would take turns on it"
    if not context.open_load and context.concurrency < 2:
        return ("one client at a time (closed load, concurrency 1): a second instance would have nothing to serve; "
                "it applies to open load or several clients")
    return None


def space(context: Context) -> dict:
    counts = tuple(count for count in COUNTS if count <= context.cores)
    return {"serving.instances": Choice((1,) + counts), "serving.mode": Choice(("thread", "process"))}


def snippet(plan: dict) -> str:
    count, mode = plan["serving.instances"], plan["serving.mode"]
    if mode == "process":
        return (
            "import os, torch, torch.multiprocessing as mp\n"
            f"INSTANCES = {count}\n"
            "def instance(requests, replies):  # one process per instance, started with mp.get_context('fork')\n"
            "    torch.set_num_threads(max(1, os.cpu_count() // INSTANCES))\n"
            "    while (item := requests.get()) is not None:\n"
            "        key, x = item\n"
            "        with torch.inference_mode():\n"
            "            replies.put((key, model(x)))\n"
            "context = mp.get_context('fork')\n"
            "requests, replies = context.Queue(), context.Queue()\n"
            "workers = [context.Process(target=instance, args=(requests, replies), daemon=True) for _ in range(INSTANCES)]\n"
            "for worker in workers: worker.start()"
        )
    return (
        "import copy, os, torch\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        f"INSTANCES = {count}\n"
        "torch.set_num_threads(max(1, os.cpu_count() // INSTANCES))\n"
        "models = [model] + [copy.deepcopy(model) for _ in range(INSTANCES - 1)]\n"
        "free = __import__('queue').Queue()\n"
        "for m in models: free.put(m)\n"
        "def handle(x):  # each request: a free instance, one call, then the instance is free again\n"
        "    m = free.get()\n"
        "    try:\n"
        "        with torch.inference_mode():\n"
        "            return m(x)\n"
        "    finally:\n"
        "        free.put(m)\n"
        "pool = ThreadPoolExecutor(max_workers=INSTANCES)  # pool.submit(handle, x) per request"
    )


RECIPE = Recipe(
    name="serving",
    summary="serve N model instances side by side (threads or processes), the cores split between them",
    targets=("under-batched", "tail", "compute", "overhead"),
    risk="tolerance",  # each instance runs on fewer intra-op threads: its sums may split another way
    keys=("serving.instances", "serving.mode"),
    why_not=why_not,
    space=space,
    snippet=snippet,
    textbook=lambda context: {"serving.instances": max(c for c in (1,) + COUNTS if c <= context.cores),
                              "serving.mode": "thread"},  # measured: threads won on both references (experiments.instances)
    kinds=("infer",),
    hooks={"instances": lambda value, plan: (int(plan.get("serving.instances") or value[0]),
                                             plan.get("serving.mode") or value[1])},
    idle=lambda plan: frozenset({"serving.mode"} if (plan.get("serving.instances") or 1) == 1 else ()),
    off={"serving.instances": 1, "serving.mode": "thread"},
)
