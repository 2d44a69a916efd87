"""How fast a DataLoader can feed the step, predicted from the baseline's own evidence before the
first trial (an operational analysis of the input pipeline, after Plumber, MLSys 2022).

Each sample costs `wall_ms` to load, `cpu_ms` of it on the CPU (the cached run's probe); the step
costs `compute_ms` a batch when fed from memory (the synthetic run), keeping `compute_cores` of
the machine busy. On top of its own load, a sample costs CPU to hand to a pool thread and back
(`dispatch_ms`, with fetch threads) and to move, collated, from a worker to the step's process
(`handoff_ms`, with workers), both measured by the same probe. A loading process with T threads
fetches min(min(T, batch) / wall_ms, 1 / its CPU per sample) samples a millisecond: its threads
overlap their waits, one batch at a time, but Python's GIL runs their CPU work one at a time.
P worker processes load alongside the step; with none, the main process loads between steps.
The job then runs at the least of what the loaders deliver, what the step can take, and what the
cores can do, and the term that binds says why. The plan is the cheapest that reaches the best
rate, with loaders that deliver 1.2x what the step could take alone where one does, so the step
has room at a slow sample. Under a memory budget, no more workers than the budget leaves room for, at each worker's
own memory (measured by the probe). Pure functions: `advisor.session` asks for the plan, and the
report compares it with what was measured.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

FETCH_THREADS = "dataloader.fetch_threads"  # the plan keys the prediction sets
WORKERS, PREFETCH, PERSISTENT = "dataloader.num_workers", "dataloader.prefetch_factor", "dataloader.persistent_workers"
INTRA_OP = "threads.intra_op"  # the step's threads, set beside the loaders where the space tunes them
NEAR_BEST = 0.97  # plans within 3% of the best predicted rate count as reaching it: the cheapest is taken
# ...among those whose loaders alone deliver 1.2x the rate the step could take, where any do: a
# loader that only matches the step's mean rate leaves it waiting at each slow sample (on 2026-12-03's quickstart,
# 1 worker x 2 threads, predicted within 3% with under 1.2x to spare, ran 8% under 2 or 3 workers)
HEADROOM = 1.2
OFF_BY = 1.5  # a prediction further than this from the measurement names the term that was off
BOUNDS = {
    "threads": "the fetches in flight (workers x threads, a batch's samples at most, / the per-sample load time)",
    "gil": "each loading process's CPU work per sample (its load, thread dispatch, batch hand-off), one thread at a time (the GIL)",
    "compute": "the step fed from memory (the ideal)",
    "cores": "the machine's cores, shared by the loaders' CPU work (loads, thread dispatch, hand-off between processes) and the step's",
    "serial": "loading and the step taking turns in the main process (no workers)",
}


@dataclass(frozen=True)
class LoaderCosts:
    """The baseline's input and compute costs, from its evidence."""

    wall_ms: float  # per sample, loading it
    cpu_ms: float  # per sample, the part of that on the CPU
    compute_ms: float  # per batch, the step fed from memory
    batch: int
    cores: int
    compute_cores: float  # cores the step alone keeps busy
    dispatch_ms: float = 0.0  # per sample, handing it to a pool thread and back (fetch threads)
    handoff_ms: float = 0.0  # per sample, moving its batch from a worker process to the step's
    worker_mb: float = 0.0  # the memory each worker process holds alone (0: not measured)


@dataclass(frozen=True)
class Prediction:
    plan: dict  # the loader's settings: workers, threads, prefetch, persistence
    samples_per_s: float
    bound: str  # a key of BOUNDS: the term that limits it

    def to_dict(self) -> dict:
        return {"plan": self.plan, "samples_per_s": self.samples_per_s, "bound": self.bound, "why": BOUNDS[self.bound]}


def costs_of(derived: dict, synthetic_cpu_util: float, batch: int, cores: int) -> Optional[LoaderCosts]:
    """The costs, where the evidence has them (a per-sample probe and the ideal step); else None."""
    wall, cpu, compute = derived.get("sample_wall_ms"), derived.get("sample_cpu_ms"), derived.get("ideal_step_ms")
    if not wall or cpu is None or not compute or batch <= 0:
        return None
    # the faster of the step's two readings from memory: a run disturbed a moment reads slow, never fast
    compute = min(compute, derived.get("cached_compute_ms") or compute)
    return LoaderCosts(wall_ms=wall, cpu_ms=max(min(cpu, wall), 1e-3), compute_ms=compute, batch=batch, cores=cores,
                       compute_cores=max(0.0, min(cores, synthetic_cpu_util * cores)),
                       dispatch_ms=derived.get("sample_dispatch_ms", 0.0), handoff_ms=derived.get("sample_handoff_ms", 0.0),
                       worker_mb=derived.get("loader_worker_mb", 0.0))


def _overheads(costs: LoaderCosts, workers: int, threads: int) -> tuple[float, float]:
    """A sample's CPU for thread dispatch and for the hand-off between processes, where paid."""
    dispatch = costs.dispatch_ms if threads > 1 else 0.0
    handoff = costs.handoff_ms if workers > 0 else 0.0  # pickled in the worker, unpickled by the step's process
    return dispatch, handoff


def _per_process(costs: LoaderCosts, workers: int, threads: int) -> dict[str, float]:
    """What one loading process fetches a millisecond, by the two terms that can bind it."""
    dispatch, handoff = _overheads(costs, workers, threads)
    # a pool fetches one batch at a time, so no more than a batch is in flight
    return {"threads": min(threads, costs.batch) / costs.wall_ms, "gil": 1 / (costs.cpu_ms + dispatch + handoff / 2)}


def supply(costs: LoaderCosts, workers: int, threads: int) -> float:
    """Samples/s the loading processes deliver alone, the step and the other cores aside."""
    return 1000 * max(workers, 1) * min(_per_process(costs, workers, threads).values())


def rate(costs: LoaderCosts, workers: int, threads: int) -> tuple[float, str]:
    """Samples/s under `workers` loading processes of `threads` threads each, and the term that binds."""
    dispatch, handoff = _overheads(costs, workers, threads)
    per_process = _per_process(costs, workers, threads)  # samples a millisecond
    process_bound = min(per_process, key=per_process.get)
    if workers == 0:
        per_batch = costs.batch / per_process[process_bound] + costs.compute_ms
        return 1000 * costs.batch / per_batch, "serial"
    terms = {
        process_bound: workers * per_process[process_bound],
        "compute": costs.batch / costs.compute_ms,
        "cores": costs.cores / (costs.cpu_ms + dispatch + handoff + costs.compute_ms * costs.compute_cores / costs.batch),
    }
    bound = min(terms, key=terms.get)
    return 1000 * terms[bound], bound


def workers_that_fit(costs: LoaderCosts, max_workers: int, spare_mb: Optional[float]) -> int:
    """The most worker processes whose own memory fits the `spare_mb` a memory budget leaves over
    the baseline's peak (None: no budget; a worker's memory unmeasured: no cap)."""
    if spare_mb is None or costs.worker_mb <= 0:
        return max_workers
    return max(0, min(max_workers, int(spare_mb // costs.worker_mb)))


def predict(costs: LoaderCosts, max_workers: int, thread_choices: tuple[int, ...]) -> Prediction:
    """The cheapest loader (fewest processes, then fewest threads) within 3% of the best rate the
    model sees among `max_workers` processes (`workers_that_fit` the memory budget) and
    `thread_choices` threads each, and, where any such loader has it, loaders that alone deliver
    `HEADROOM` times the rate the step could take with its own CPU no burden on them."""
    plans = [(workers, threads, *rate(costs, workers, threads))
             for workers in range(max_workers + 1) for threads in thread_choices]
    best = max(samples for *_, samples, _ in plans)
    reaching = [p for p in plans if p[2] >= NEAR_BEST * best]
    # the room is over the rate the step could take were its own CPU no burden on the loaders':
    # the cores term charges it every core it keeps busy alone, and reads low
    unshared = dataclasses.replace(costs, compute_cores=0.0)
    feeds = max(rate(unshared, workers, threads)[0] for workers, threads, *_ in plans)
    roomy = [p for p in reaching if p[0] and supply(costs, p[0], p[1]) >= HEADROOM * feeds]
    workers, threads, samples, bound = min(roomy or reaching, key=lambda p: (p[0], p[1]))
    plan = {WORKERS: workers, FETCH_THREADS: threads}
    if workers:
        plan.update({PREFETCH: 2, PERSISTENT: True})
    return Prediction(plan, samples, bound)


def step_threads(costs: LoaderCosts, prediction: Prediction, most: int) -> int:
    """The intra-op threads the step keeps beside the predicted loaders: the cores their CPU work
    leaves (at its predicted rate), at least 1, at most `most`. Worker processes computing beside
    a step that takes every core slow both down; with no workers the step has the machine."""
    if not prediction.plan.get(WORKERS):
        return most
    threads = int(prediction.plan.get(FETCH_THREADS) or 1)
    per_sample = costs.cpu_ms + sum(_overheads(costs, prediction.plan[WORKERS], threads))
    busy = prediction.samples_per_s / 1000 * per_sample  # cores the loaders keep busy
    return max(1, min(most, round(costs.cores - busy)))


def predicted_for(costs: LoaderCosts, plan: dict) -> Prediction:
    """What the model says of any plan's loader settings."""
    workers, threads = int(plan.get(WORKERS) or 0), int(plan.get(FETCH_THREADS) or 1)
    return Prediction({WORKERS: workers, FETCH_THREADS: threads}, *rate(costs, workers, threads))


def same_loader(plan: dict, loader: dict) -> bool:
    """Whether a plan runs the loader a prediction names (prefetch and persistence only with workers)."""
    keys = (WORKERS, FETCH_THREADS, PREFETCH, PERSISTENT) if loader.get(WORKERS) else (WORKERS, FETCH_THREADS)
    return all((plan.get(key) or (1 if key == FETCH_THREADS else 0)) == (loader.get(key) or (1 if key == FETCH_THREADS else 0))
               for key in keys)


def judged(prediction: Prediction, measured_samples_per_s: float) -> dict:
    """A prediction beside its measurement: their ratio, and, where it is off by more than 1.5x,
    which term was (the one the model took to bind)."""
    ratio = measured_samples_per_s / prediction.samples_per_s if prediction.samples_per_s else 0.0
    off = not (1 / OFF_BY <= ratio <= OFF_BY)
    return {**prediction.to_dict(), "measured_samples_per_s": measured_samples_per_s, "measured_over_predicted": ratio,
            "off": f"off by {max(ratio, 1 / ratio) if ratio else float('inf'):.1f}x: the model took it to be bound by "
                   f"{BOUNDS[prediction.bound]}, and that term's estimate was wrong" if off else ""}
