"""A model served under a load pattern, in one of two modes:

  full     the timed replay: the model loaded (and warmed, when the plan asks), the first
           request after load timed on its own (the cold start), `measure.warmup_requests`
           served untimed, then `measure.requests` replayed under `load` with each request's
           latency recorded from its arrival to its output being ready, as a client sees it.
  profile  a few requests under torch.profiler, for the operator table; never timed.

Closed load: N clients, each sending its next request when the last one returned. Open load:
Poisson arrivals at `rate_per_s` (seeded), served in arrival order by one server, so time spent
queueing is part of the latency; with dynamic batching the server takes every request that
has arrived, up to the batch size, waiting at most the plan's wait for more.
"""

from __future__ import annotations

import bisect
import queue
import random
import statistics
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional

import psutil
import torch

from advisor import capacity
from advisor.config import AdvisorConfig
from advisor.errors import UserError
from advisor.harness import instances
from advisor.harness.batches import concat, describe, map_tensors, tensors, to_device
from advisor.harness.operators import STEP_LABEL, summarize_profile
from advisor.harness.train import (
    PROGRESS_EVERY_S,
    conv_layers,
    cpu_seconds,
    gpu_facts,
    prepare_process,
    report_progress,
    synchronize,
)
from advisor.measure import machine_busy_seconds, other_cpu_share, percentile, tree_memory
from advisor.recipes import applied, around, chain, quantize_dynamic

NUMERICS_REQUESTS = 32  # requests whose outputs every plan keeps, for the comparison with the baseline's


@dataclass
class InferJob:
    """The user's service as the replay needs it: the model, the requests, the call."""

    model: torch.nn.Module
    requests: list
    handler: Optional[Callable[[Any, Any], Any]] = None  # the user's own handle(model, request)


def run(config: AdvisorConfig, build_job: Callable[[], InferJob], plan: dict, mode: str,
        output_path: Optional[str] = None, progress: Optional[str] = None) -> dict:
    device, default_threads = prepare_process(config, plan)
    count, instance_mode = applied("instances", (1, "thread"), plan) if mode == "full" else (1, "thread")
    load_start = time.perf_counter()
    job = build_job()
    copies = instances.model_copies(job.model, count) if instance_mode == "thread" else [job.model]
    if len(copies) > 1:
        torch.set_num_threads(instances.threads_each(count))
    models = [prepare_model(copy, plan, device) for copy in copies]
    servers = [make_server(model, job.handler, plan, device) for model in models]
    serve = servers[0]
    requests = [to_device(request, device) for request in check_requests(job.requests, job.handler is not None)]
    warm_start = time.perf_counter()
    for index in range(applied("warm_requests", 0, plan)):  # the warmup recipe: at load time, before any client
        for server in servers:
            server([requests[index % len(requests)]])
    warm_ms = 1000 * (time.perf_counter() - warm_start)
    load_s = time.perf_counter() - load_start
    cold_start = time.perf_counter()
    first_call(serve, requests[0], job)
    cold_start_ms = 1000 * (time.perf_counter() - cold_start)
    environment = describe_service(job, models[0], device, default_threads)
    if mode == "profile":
        return {"device": device.type, "setup_s": load_s, "environment": environment,
                "operators": {**profile_requests(serve, requests, device, config.measure.profile_steps), "per": "request"}}
    stop = lambda: None  # noqa: E731
    if instance_mode == "process" and count > 1:
        servers, stop = instances.forked(serve, count)
        serve = servers[0]
    try:
        for index in range(config.measure.warmup_requests):  # round the instances
            servers[index % len(servers)]([requests[(index + 1) % len(requests)]])
        return timed_replay(config, servers, requests, plan, output_path, progress, device, load_s, cold_start_ms,
                            warm_ms, environment)
    finally:
        stop()


def timed_replay(config: AdvisorConfig, servers: list, requests: list, plan: dict, output_path: Optional[str],
                 progress: Optional[str], device, load_s: float, cold_start_ms: float, warm_ms: float,
                 environment: dict) -> dict:
    """The timed requests replayed under the configured load (or, for objective capacity, at
    the rates its bracketing search picks), then the outputs the numerics compare."""
    timed = [requests[index % len(requests)] for index in range(config.measure.requests)]
    batch, wait_s = applied("batching", (1, 0.0), plan)
    cpu_start, busy_start, window_start = cpu_seconds(), machine_busy_seconds(), time.time()
    wall_start = time.perf_counter()
    report = progress_reporter(progress, config.objective, len(timed))
    if config.objective == "capacity":
        latency = capacity_replay(servers, timed, config, batch, wait_s, cold_start_ms, load_s)
    elif config.load.mode == "open":
        latency = open_replay(servers, timed, config.load.rate_per_s, batch, wait_s, config.measure.seed, cold_start_ms,
                              load_s, report, full_load=config.objective == "p95")  # `verify.near_its_limit`
    else:
        latencies, services, sizes = closed_loop(servers, timed, config.load.concurrency, report)
        latency = latency_summary(latencies, services, sizes, time.perf_counter() - wall_start, cold_start_ms, load_s)
        latency["rate_per_s"] = None
    wall = time.perf_counter() - wall_start
    cpu_used = cpu_seconds() - cpu_start
    others = other_cpu_share(machine_busy_seconds() - busy_start, cpu_used, wall)  # read with cpu_used: the window alone
    repeat_difference = None
    if output_path:
        outputs = numerics_outputs(servers[0], requests, batch)
        torch.save(outputs, output_path)
        repeat_difference = worst_difference(numerics_outputs(servers[0], requests, batch), outputs)
    objective = {"p95": 1000 / latency["p95_ms"], "capacity": latency.get("capacity", {}).get("per_s", 0.0)}.get(
        config.objective, latency["throughput_per_s"])
    return {
        "device": device.type, "setup_s": load_s, "environment": environment, "samples": len(timed),
        "samples_per_s": objective, "step_ms_mean": latency["mean_ms"], "step_ms_p50": latency["p50_ms"],
        "step_ms_p95": latency["p95_ms"], "data_wait_share": latency["queue_share"],
        "latency": latency, "warmup_ms": [warm_ms + cold_start_ms],  # where compiling happens, for its cost
        "cpu_util": min(1.0, cpu_used / (wall * (psutil.cpu_count() or 1))),
        "other_cpu_share": others,
        "window": (window_start, time.time()), "memory_end": tree_memory_dict(),
        "output": {"path": output_path, "requests": min(NUMERICS_REQUESTS, len(requests)),
                   "repeat_difference": repeat_difference} if output_path else {},
    }


def open_replay(servers: list, timed: list, rate_per_s: float, batch: int, wait_s: float, seed: int,
                cold_start_ms: float, load_s: float, report: Optional[Report] = None, full_load: bool = False,
                slo_ms: Optional[float] = None) -> dict:
    """The timed requests replayed as open load at one rate, summarised (saturation included);
    with `full_load`, replayed again all queued at once, for `full_load_rate`; with `slo_ms`,
    stopped once its p95 is sure to break it (`open_loop`), and, served one request at a time,
    the capacity its service times read off (`capacity.read_off`: a stopped replay's too, from
    the requests it answered, the first to arrive)."""
    start = time.perf_counter()
    latencies, services, sizes, arrivals, completions = open_loop(servers, timed, rate_per_s, batch, wait_s, seed, report,
                                                                  slo_ms)
    summary = latency_summary(latencies, services, sizes, time.perf_counter() - start, cold_start_ms, load_s,
                              arrivals, completions)
    if slo_ms is not None and batch == 1 and len(services) >= capacity.MIN_REQUESTS and not summary["saturated"]:
        answered_p95 = percentile([1000 * value for value in latencies[:len(services)]], 95)  # a stopped replay's answered ones
        summary["reads_off_per_s"] = capacity.read_off(services, rate_per_s, answered_p95, slo_ms,
                                                       poisson_arrivals(len(timed), 1.0, seed), len(servers))
    if full_load:
        summary["full_load_per_s"] = full_load_rate(servers, timed, batch, wait_s, seed)
    return {**summary, "rate_per_s": rate_per_s}


def sure_over(count: int) -> int:
    """How many of `count` requests must take longer than an SLO for their p95 (`percentile`,
    interpolated) to break it, whatever the others take: those from its lower rank up."""
    return count - int((count - 1) * 0.95)


AT_ONCE_PER_S = 1e9  # an arrival rate at which every request is queued before the first is served


def full_load_rate(servers: list, timed: list, batch: int, wait_s: float, seed: int) -> float:
    """The most requests the plan answers a second: every request queued at once, so the
    server never waits for one and a batching plan always fills its batches. A baseline that
    cannot keep up answers about this under any rate past it, and the figure scales with the
    host's pace as every plan's does, so a ratio of two plans' holds from one hour to the next
    where what each answered at one offered rate near the baseline's limit does not."""
    _, _, _, arrivals, completions = open_loop(servers, timed, AT_ONCE_PER_S, batch, wait_s, seed)
    return capacity.served_rate(arrivals, completions)


SINGLE_REQUESTS = 50  # served one at a time, no queue, before a capacity search: the latency no rate can beat
CAPACITY_SHARE = 0.5  # of the run's time limit, a capacity search's own: no replay begins past it
SETTLE_SHARE = 0.25  # of the run's time limit, the most its settling takes (`settle`): a slow service's stops there


def capacity_replay(servers: list, timed: list, config: AdvisorConfig, batch: int, wait_s: float,
                    cold_start_ms: float, load_s: float) -> dict:
    """Objective capacity: the service settled (`settle`), the requests served one at a time
    (the p95 no arrival rate can beat; over the SLO, served once more before it counts), then `capacity.bracket`'s
    rates replayed as open load, each over the timed requests with the same seeded arrivals
    scaled. Returns the summary at the capacity (at the
    lowest rate replayed, when no rate keeps the SLO) with the search under `capacity`."""
    slo = config.constraints.p95_ms
    settle(servers, timed, time.monotonic() + SETTLE_SHARE * config.measure.timeout_s)
    for _ in range(2):  # over the SLO once may be a burst of other work: it must be so twice
        single, _, _ = closed_loop(servers[:1], timed[:SINGLE_REQUESTS], 1)
        single_ms = [1000 * value for value in single]
        single_p95 = percentile(single_ms, 95)
        if single_p95 <= slo:
            break
    summaries: dict[float, dict] = {}

    deadline = time.monotonic() + CAPACITY_SHARE * config.measure.timeout_s  # never the run's time limit: "hung"

    def measure_at(rate: float, full: bool) -> capacity.Point:
        offered = timed[:capacity.requests_at(rate, full, len(timed), deadline - time.monotonic())]
        summaries[rate] = summary = open_replay(servers, offered, rate, batch, wait_s, config.measure.seed, cold_start_ms,
                                                load_s, slo_ms=slo)
        shown = None if summary["saturated"] else summary
        return capacity.Point(rate, summary["served_per_s"], shown and shown["p50_ms"], shown and shown["p95_ms"],
                              shown and shown["p99_ms"], summary["saturated"], summary.get("reads_off_per_s"))

    found, points, predicted = 0.0, [], None
    if single_p95 <= slo:
        # one request at a time in the times just measured, queued as the replays' arrivals come: where the
        # capacity most likely is (a batching server's service time is not one request's: it starts as before)
        predicted = capacity.predicted_capacity(single, slo, poisson_arrivals(len(timed), 1.0, config.measure.seed),
                                                len(servers)) if batch == 1 else None
        start_rate = predicted or config.load.rate_per_s or 500.0 / statistics.fmean(single_ms)  # half of one-at-a-time's pace
        found, points = capacity.bracket(measure_at, slo, start_rate, lambda: time.monotonic() > deadline,
                                         guided=predicted is not None)
    if not summaries:
        summary = latency_summary(single, single, [1] * len(single), sum(single), cold_start_ms, load_s)
        summaries[0.0] = {**summary, "rate_per_s": None}
    at = summaries[found] if found else summaries[min(summaries)]
    return {**at, "capacity": {
        "per_s": found, "slo_ms": slo, "single_p95_ms": single_p95, "points": [p.to_dict() for p in points],
        "predicted_per_s": predicted,
        "replayed": len(points), "saturates_at_per_s": capacity.saturates_at(points),
    }}


def settle(servers: list, timed: list, until: float) -> None:
    """Serves each distinct request the replays offer once on every instance, one at a time,
    before a capacity search: a capacity is a warm service's (its cold start is the p95
    objective's). A service slow for its first requests (a table built for each input shape as it
    comes) would otherwise warm through the search's replays, and its figure would hang on how
    many came before the edge: `python -m experiments.capacity_order` read 890/s for a cold
    plan that broke a 103 ms SLO at 100/s from its own start, and 299/s for the same service
    warmed on 32 requests, which a search from the start would have called 3x slower. Stops at
    `until` (`time.monotonic`), its share of the run's time limit."""
    distinct = list({id(request): request for request in timed}.values())  # the timed requests cycle the source's
    for server in servers:
        for request in distinct:
            if time.monotonic() > until:
                return
            server([request])


def tree_memory_dict() -> dict:
    import os

    return tree_memory(os.getpid()).to_dict()


def prepare_model(model: Any, plan: dict, device: torch.device) -> torch.nn.Module:
    """The model as the plan serves it: eval mode, on its device, then the weight and layout
    recipes, then compile."""
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"workload.model: the builder returned {type(model).__name__}; return a torch.nn.Module")
    model.eval()
    return applied("compiled", applied("model", model.to(device), plan), plan)


def make_server(model, handler: Optional[Callable], plan: dict, device: torch.device) -> Callable[[list], list]:
    """Serves a list of requests, returning one output per request: one call each, or (with
    dynamic batching) one call on the requests concatenated along their first dimension."""
    prepared = chain("request", plan)
    serving = around("around_serve", plan, device_type=device.type)

    def call(request: Any) -> Any:
        return call_model(model, handler, prepared(request))

    def serve(batch: list) -> list:
        with serving():
            if len(batch) == 1:
                outputs = [call(batch[0])]
            else:
                sizes = [int(tensors(r)[0].shape[0]) for r in batch]
                outputs = split_output(call(concat(batch)), sizes)
        synchronize(device)
        return outputs

    return serve


def split_output(output: Any, sizes: list[int]) -> list:
    """One output per request, from the output of their joined call."""
    total = sum(sizes)
    return [map_tensors(output, lambda t, i=i: t.split(sizes)[i] if t.dim() and t.shape[0] == total else t)
            for i in range(len(sizes))]


Report = Callable[[int, list, float], None]  # (requests answered, latencies (0.0 or absent: unanswered), seconds so far)


def progress_reporter(path: Optional[str], objective: str, total: int) -> Optional[Report]:
    """Writes the timed window so far for the parent's pruner (as the training harness does):
    requests answered over seconds, which the pruner bounds as it bounds samples per second; for
    a p95 objective also the best 1000 / p95 ms the replay can still end at (`best_case_p95`).
    The p95 of the requests answered so far says little midway: a hiccup early on weighs on the
    few answered (a plan that ended at 0.7 ms read 110 ms at a third of its requests), and a
    queue that grows later has not shown yet."""
    if not path or objective == "capacity":  # a capacity's rates come one after another: no running figure
        return None
    reported = 0.0

    def report(done: int, latencies: list, seconds: float) -> None:
        nonlocal reported
        if not done or seconds - reported < PROGRESS_EVERY_S:
            return
        reported = seconds
        lowest = best_case_p95(latencies, total) if objective == "p95" else None  # unanswered: 0.0 or absent
        if lowest == 0.0:
            return  # under 5% of the requests answered: any p95 can still be reached
        report_progress(path, done, total, done, seconds, 1.0 / lowest if lowest else None)  # 1 / p95 s = 1000 / p95 ms

    return report


def best_case_p95(answered: list[float], total: int) -> float:
    """The lowest p95 a replay of `total` requests can still end at: the requests not answered
    yet (absent, or 0.0) taken as instant. Only latencies already over it at 5% of all requests
    can hold it up."""
    return percentile(answered + [0.0] * (total - len(answered)), 95)


def closed_loop(servers: list, requests: list, concurrency: int, report: Optional[Report] = None) -> tuple[list, list, list]:
    """`concurrency` clients, each sending its next request when its last returned. One server
    takes every client's call as it comes; several (model instances) are a pool, each serving
    one call at a time."""
    latencies: list[float] = []
    lock = threading.Lock()
    pool: "queue.Queue" = queue.Queue()
    for server in servers:
        pool.put(server)
    start = time.perf_counter()

    def client(mine: list) -> None:
        for request in mine:
            t0 = time.perf_counter()
            if len(servers) == 1:
                servers[0]([request])
            else:
                server = pool.get()
                try:
                    server([request])
                finally:
                    pool.put(server)
            elapsed = time.perf_counter() - t0
            with lock:
                latencies.append(elapsed)
                if report:
                    report(len(latencies), latencies, time.perf_counter() - start)

    together(client, [requests[i::concurrency] for i in range(concurrency)])
    return latencies, list(latencies), [1] * len(latencies)


def together(work: Callable, shares: list) -> None:
    """`work` on each share at once, one thread each (inline when there is one)."""
    if len(shares) == 1:
        work(shares[0])
        return
    threads = [threading.Thread(target=work, args=(share,)) for share in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def poisson_arrivals(count: int, rate_per_s: float, seed: int) -> list[float]:
    generator = random.Random(seed)
    arrivals, now = [], 0.0
    for _ in range(count):
        now += generator.expovariate(rate_per_s)
        arrivals.append(now)
    return arrivals


class Arrivals:
    """The open load's queue: each free server takes the requests that have arrived (the next
    one waited for), up to `max_batch`, waiting up to `max_wait_s` after the first for more.
    One server collects at a time, so requests are served in arrival order."""

    def __init__(self, arrivals: list[float], max_batch: int, max_wait_s: float, start: float):
        self.arrivals, self.max_batch, self.max_wait_s, self.start = arrivals, max_batch, max_wait_s, start
        self.index = 0
        self.lock = threading.Lock()
        self.stopped = False  # the replay was stopped: no server takes another request

    def waiting_past(self, arrived_by: float) -> range:
        """The positions of the requests not yet taken that arrived by `arrived_by` (seconds from the start)."""
        index = self.index
        return range(index, max(index, bisect.bisect_right(self.arrivals, arrived_by)))

    def take(self) -> Optional[tuple[int, int]]:
        """The next batch's first and past-last positions; None when every request is taken, or
        the replay was stopped."""
        arrivals, count = self.arrivals, len(self.arrivals)
        with self.lock:
            index = self.index
            if index >= count or self.stopped:
                return None
            now = time.perf_counter() - self.start
            if arrivals[index] > now:
                time.sleep(arrivals[index] - now)
            end = index + 1
            deadline = max(arrivals[index], time.perf_counter() - self.start) + self.max_wait_s
            while end < count and end - index < self.max_batch:
                now = time.perf_counter() - self.start
                if arrivals[end] <= now:
                    end += 1
                elif arrivals[end] <= deadline:
                    time.sleep(arrivals[end] - now)
                else:
                    break
            self.index = end
            return index, end


def open_loop(servers: list, requests: list, rate_per_s: float, max_batch: int, max_wait_s: float,
              seed: int, report: Optional[Report] = None,
              slo_ms: Optional[float] = None) -> tuple[list, list, list, list, list]:
    """Poisson arrivals served in order by the servers (one, or a model instance each); a
    request's latency runs from its arrival (queueing included) to its output. With `max_batch`
    > 1 a server takes what has arrived, and waits up to `max_wait_s` after the first for more,
    up to `max_batch`. Returns latencies, service times, batch sizes, arrivals and completions
    (seconds from the start). With `slo_ms`, the replay stops once `sure_over` of its requests
    took longer (answered, or still waiting past it): the p95 breaks the SLO whatever the rest
    take. Its lists then hold the requests answered and those waiting past the SLO (their time
    so far: less than they will take), a p95 over them breaking it too."""
    arrivals = poisson_arrivals(len(requests), rate_per_s, seed)
    latencies, completions = [0.0] * len(requests), [0.0] * len(requests)
    services, sizes = [], []
    lock = threading.Lock()
    start = time.perf_counter()
    waiting = Arrivals(arrivals, max_batch, max_wait_s, start)
    answered, over, needed = 0, 0, sure_over(len(requests)) if slo_ms is not None else 0
    late: list[int] = []  # waiting past the SLO when the replay stopped

    def server_loop(serve: Callable) -> None:
        nonlocal answered, over
        while (taken := waiting.take()) is not None:
            index, end = taken
            t0 = time.perf_counter()
            serve(requests[index:end])
            done = time.perf_counter()
            with lock:
                services.append(done - t0)
                sizes.append(end - index)
                for position in range(index, end):
                    latencies[position] = done - start - arrivals[position]
                    completions[position] = done - start
                    over += slo_ms is not None and 1000 * latencies[position] > slo_ms
                answered += end - index
                if report:
                    report(answered, latencies, done - start)
                if needed and not waiting.stopped:
                    waited = waiting.waiting_past(done - start - slo_ms / 1000)
                    if over + len(waited) >= needed:
                        waiting.stopped = True
                        late.extend(waited)
                        for position in waited:
                            latencies[position], completions[position] = done - start - arrivals[position], done - start

    together(server_loop, servers)
    if waiting.stopped:
        kept = sorted(set(range(waiting.index)) | set(late))
        return ([latencies[i] for i in kept], services, sizes, [arrivals[i] for i in kept], [completions[i] for i in kept])
    return latencies, services, sizes, arrivals, completions


def latency_summary(latencies: list, services: list, sizes: list, wall: float, cold_start_ms: float,
                    load_s: float, arrivals: Optional[list] = None, completions: Optional[list] = None) -> dict:
    """The replay's percentiles, throughput, service times and queueing; for open load (its
    arrivals and completions given) also what was answered a second and whether the queue grew
    without bound (`capacity.saturated`): then the percentiles measure the run's length."""
    ms = [1000 * value for value in latencies]
    service_ms = [1000 * value for value in services]
    mean = sum(ms) / len(ms)
    mean_service = sum(s * n for s, n in zip(service_ms, sizes)) / sum(sizes)  # per request served
    summary = {
        "p50_ms": percentile(ms, 50), "p95_ms": percentile(ms, 95), "p99_ms": percentile(ms, 99), "max_ms": max(ms),
        "mean_ms": mean, "throughput_per_s": len(ms) / wall, "cold_start_ms": cold_start_ms, "load_s": load_s,
        "service_ms_p50": percentile(service_ms, 50), "service_ms_p95": percentile(service_ms, 95),
        "queue_share": max(0.0, mean - mean_service) / mean if mean else 0.0,
        "mean_batch": sum(sizes) / len(sizes), "latencies_ms": ms,
    }
    if arrivals is not None and completions is not None:
        summary["served_per_s"] = capacity.served_rate(arrivals, completions)
        summary["saturated"] = capacity.saturated(arrivals, completions, ms)
    return summary


def numerics_outputs(serve: Callable, requests: list, max_batch: int) -> list:
    """The outputs of the first requests, served as the plan serves them (in batches, if it
    batches), moved to the CPU as float32 for the comparison."""
    chosen = requests[:NUMERICS_REQUESTS]
    outputs = []
    for start in range(0, len(chosen), max_batch):
        outputs += serve(chosen[start:start + max_batch])
    return [[t.detach().float().cpu() for t in tensors(output)] for output in outputs]


def worst_difference(again: list, first: list) -> float:
    """The largest difference between two passes over the same requests, relative to each
    tensor's largest magnitude: 0 for a service that answers the same twice, what dropout left on
    or sampling makes it otherwise (a NaN counts as a total difference)."""
    worst = 0.0
    for outputs, expected in zip(again, first):
        for got, want in zip(outputs, expected):
            if got.shape != want.shape:
                return float("inf")
            if got.numel():
                same = (got == want) | (got.isnan() & want.isnan())  # the same NaN or infinity twice: no difference
                gap = torch.where(same, 0.0, (got - want).abs().nan_to_num(float("inf")))
                worst = max(worst, float(gap.max() / want.abs().nan_to_num(0.0, 0.0, 0.0).max().clamp_min(1e-12)))
    return worst


def profile_requests(serve: Callable, requests: list, device: torch.device, count: int) -> dict:
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    compute_s = 0.0
    with profile(activities=activities) as prof:
        for index in range(count):
            t0 = time.perf_counter()
            with record_function(STEP_LABEL):
                serve([requests[index % len(requests)]])
            compute_s += time.perf_counter() - t0
    return summarize_profile(prof.events(), count, compute_s, on_cuda=device.type == "cuda")


def describe_service(job: InferJob, model: torch.nn.Module, device: torch.device, default_threads: int) -> dict:
    """What recipe selection and the fingerprint need to know, seen from inside the child."""
    first = job.requests[0]
    return {
        "sample": describe(first),
        "device": device.type,
        "default_threads": default_threads,
        "parameters": sum(p.numel() for p in job.model.parameters()),
        "linear_layers": len(quantize_dynamic.quantizable(job.model)),
        "conv_layers": conv_layers(job.model),
        "batchable": job.handler is None and batchable(job.requests),  # a handler takes one request
        # on the model's device: the model was moved there in place (a CPU request crashed every CUDA service)
        "grad_enabled_outputs": any(t.requires_grad for t in tensors(serve_once(job, to_device(first, device)))),
        "torch": torch.__version__,
        **gpu_facts(device),
    }


def serve_once(job: InferJob, request: Any) -> Any:
    """One call as the user's service makes it (to see whether it runs with gradients on)."""
    return call_model(job.model, job.handler, request)


def call_model(model: Any, handler: Optional[Callable], request: Any) -> Any:
    """One request through the user's handler, else the model: a dict as keywords, a tuple as arguments."""
    if handler is not None:
        return handler(model, request)
    if isinstance(request, Mapping):
        return model(**request)
    if isinstance(request, (tuple, list)):
        return model(*request)
    return model(request)


def batchable(requests: list) -> bool:
    """Requests can be joined along their first dimension: the same structure, tensors that
    agree beyond it."""
    shapes = [[tuple(t.shape[1:]) for t in tensors(r)] for r in requests[:64]]
    return bool(shapes[0]) and all(s == shapes[0] for s in shapes) and all(
        t.dim() >= 1 for t in tensors(requests[0]))


def first_call(serve: Callable, request: Any, job: InferJob) -> None:
    """The first request. When it fails and the user's own model fails on it too, the workload's
    contract is broken (a request the model cannot take, a handler that raises): one line. When
    only the plan's model fails, the plan broke it: a failed run, like any crash."""
    try:
        serve([request])
    except Exception as exc:
        text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        if "out of memory" in text.lower() or runs_as_written(job, request):
            raise
        if job.handler is not None:
            raise UserError(f"workload.handler: it raised on request 0 ({text[:300]}); fix the handler") from None
        raise UserError(f"workload.requests: the model cannot take request 0, {describe(request)} ({text[:300]}); "
                        "return requests shaped as one call's input") from None


def runs_as_written(job: InferJob, request: Any) -> bool:
    try:
        serve_once(job, request)
        return True
    except Exception:
        return False


def check_requests(requests: Any, handled: bool) -> list:
    """A non-empty list; without a handler of the user's, each request must hold a tensor."""
    if not isinstance(requests, (list, tuple)) or not requests:
        raise UserError(f"workload.requests: the builder returned {describe(requests)}; return a non-empty list of "
                        "requests, each the input of one call")
    if not handled and not tensors(requests[0]):
        raise UserError(f"workload.requests: request 0 is {describe(requests[0])}, with no tensor in it; each request "
                        "is what one call receives (a tensor, or a tuple or dict of tensors)")
    return list(requests)
