"""A plain PyTorch service loop, written as a user writes it, with no advisor code in it.

    python -m experiments.plain_service CONFIG [PLAN_JSON]

Serves the config's requests one at a time, back to back (a closed load of one client), with a
recommendation's plan applied by hand (inference mode, autocast, TF32, cuDNN autotuning,
channels_last, torch.compile, warm-up requests), and prints the timed requests' latency
percentiles and rate as JSON. The device check runs it to check a service's claim from outside
advisor.
"""

import contextlib
import json
import sys
import time
from pathlib import Path

import torch
import yaml

from experiments.plain_loop import load, prepare


def percentile(values: list, share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def main() -> None:
    config_path = Path(sys.argv[1]).resolve()
    plan = json.loads(Path(sys.argv[2]).read_text()) if len(sys.argv) > 2 else {}
    config = yaml.safe_load(config_path.read_text())
    workload, measure = config["workload"], config.get("measure", {})
    root = config_path.parent

    device = prepare(workload, plan)
    cuda = device.type == "cuda"
    model = load(workload["model"], root)(**workload.get("model_args", {})).eval().to(device)
    requests = [r.to(device) for r in load(workload["requests"], root)(**workload.get("requests_args", {}))]
    if plan.get("channels_last.enabled"):
        model = model.to(memory_format=torch.channels_last)
        requests = [r.contiguous(memory_format=torch.channels_last) if r.dim() == 4 else r for r in requests]
    if plan.get("compile.mode"):
        model = torch.compile(model, mode=plan["compile.mode"])

    def context():
        stack = contextlib.ExitStack()
        if plan.get("inference_mode.enabled"):
            stack.enter_context(torch.inference_mode())
        if plan.get("amp.dtype"):
            stack.enter_context(torch.autocast(device.type, dtype=getattr(torch, plan["amp.dtype"])))
        return stack

    def serve(request):
        started = time.perf_counter()
        with context():
            model(request)
        if cuda:
            torch.cuda.synchronize()
        return 1000 * (time.perf_counter() - started)

    for index in range(plan.get("warmup.requests") or 0):  # at load time, before any client
        serve(requests[index % len(requests)])
    for index in range(measure.get("warmup_requests", 20)):  # the first clients' requests, untimed
        serve(requests[index % len(requests)])
    count = measure.get("requests", 400)
    started = time.perf_counter()
    latencies = [serve(requests[index % len(requests)]) for index in range(count)]
    elapsed = time.perf_counter() - started
    print(json.dumps({"p50_ms": percentile(latencies, 0.5), "p95_ms": percentile(latencies, 0.95),
                      "requests_per_s": count / elapsed}))


if __name__ == "__main__":
    main()
