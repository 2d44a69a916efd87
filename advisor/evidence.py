"""The record of a diagnosis's runs (`Evidence`), what each run says of itself, and the checks
of the baseline's full run before anything is compared with it.

A training job's runs are the differential ones: full (fetch + prep + compute), cached
(compute + batching), synthetic (compute only) and a separate profiler run, each in its own
child; each kind derives its quantities from its runs (`advisor.kinds.<kind>.derive`), and the
diagnosis stage (`advisor.diagnosis`) runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from advisor.measure import BUSY_SHARE, Measurement

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Evidence:
    """Everything the diagnosis reads: the runs and what follows from them."""

    full: Measurement
    profile: Measurement
    synthetic: Optional[Measurement] = None  # training only
    cached: Optional[Measurement] = None  # training only
    local: Optional[Measurement] = None  # data-parallel: the same steps with no communication
    max_memory_mb: Optional[float] = None
    derived: dict = field(default_factory=dict)
    kind: str = "train"  # the workload kind whose runs these are
    workload: str = ""  # the config's name, and the fingerprint's components, when measured: whose runs
    fingerprint: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        runs = (self.full, self.synthetic, self.cached, self.local, self.profile)
        return {
            "kind": self.kind,
            "runs": {m.mode: m.to_dict() for m in runs if m is not None},
            "max_memory_mb": self.max_memory_mb,
            "derived": self.derived,
            **({"workload": self.workload, "fingerprint": self.fingerprint} if self.workload else {}),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Evidence":
        runs = {mode: Measurement.from_dict(run) for mode, run in data["runs"].items()}
        kind = data.get("kind") or ("train" if "synthetic" in runs else "pipeline")  # diagnoses saved before kinds
        return cls(**runs, max_memory_mb=data.get("max_memory_mb"), derived=data.get("derived", {}), kind=kind,
                   workload=data.get("workload", ""), fingerprint=data.get("fingerprint", {}))


def check_losses(run: Measurement) -> None:
    """A baseline whose own loss is NaN or infinite leaves nothing to compare a fix's losses with."""
    from advisor.errors import UserError
    from advisor.verify import first_non_finite

    step = first_non_finite(run.losses)
    if step is not None:
        raise UserError(f"the baseline itself produces a {run.losses[step]} loss at step {step + 1} of its timed "
                        "steps, so no fix's losses can be compared with it: fix the job first (its learning rate, "
                        "its data, its loss)")


def check_capacity(run: Measurement) -> None:
    """A service whose own single requests break its SLO has no capacity to raise: say so, with
    the p95 that breaks it."""
    from advisor.errors import UserError

    found = run.latency.get("capacity") if run.ok else None
    if found and found["single_p95_ms"] > found["slo_ms"]:
        raise UserError(f"constraints.p95_ms: {found['slo_ms']:g} ms is broken by one request at a time, with no "
                        f"queue (the service's own p95 is {found['single_p95_ms']:.1f} ms): no arrival rate keeps it; "
                        f"set it above {found['single_p95_ms']:.1f} ms, or use objective: p95 to cut the latency first")


def describe_run(run: Measurement) -> str:
    if not run.ok:
        return f"failed: {run.reason}"
    if run.mode == "profile" and run.hotspots:
        return f"{run.hotspots['samples']} stack samples of the transform, {run.wall_s:.1f} s"
    if run.latency.get("capacity"):
        from advisor.capacity import capacity_sentence

        found = run.latency["capacity"]
        return (capacity_sentence(found["per_s"], found["slo_ms"], found["replayed"]) +
                f"; one request at a time: p95 {found['single_p95_ms']:.1f} ms" +
                (f"; saturates at {found['saturates_at_per_s']:,.0f}/s" if found.get("saturates_at_per_s") else "") +
                f", {run.wall_s:.1f} s")
    if run.latency:
        lat = run.latency
        return (f"latency p50 {lat['p50_ms']:.1f} ms, p95 {lat['p95_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms, "
                f"{lat['throughput_per_s']:,.0f} requests/s, cold start {lat['cold_start_ms']:.0f} ms, {run.wall_s:.1f} s")
    if run.stages:
        shares = ", ".join(f"{name} {share:.0%}" for name, share in stage_shares(run).items())
        return f"{run.samples_per_s:,.0f} rows/s ({shares}), peak {run.peak_memory_mb:,.0f} MB, {run.wall_s:.1f} s"
    if run.mode == "profile":
        ops = run.operators
        return f"{ops.get('ops_per_step', 0):.0f} operators per {ops.get('per', 'step')}, {run.wall_s:.1f} s"
    busy = f"; other processes took {run.other_cpu_share:.0%} of the CPU" if run.other_cpu_share >= BUSY_SHARE else ""
    return f"{run.samples_per_s:,.0f} {rate_unit(run)}, step p50 {run.step_ms_p50:.1f} ms, {run.wall_s:.1f} s{busy}"


def rate_unit(run: Measurement) -> str:
    """A training run's rate: samples/s, or what the run says it counted (a script's steps/s:
    advisor sees its steps, not its batches)."""
    return run.environment.get("unit", "samples/s")


def stage_shares(run: Measurement) -> dict:
    """Each stage's share of a pipeline run's wall time (setup such as a cache build excluded)."""
    total = run.stages.get("wall_s") or 0.0
    return {name: value["wall_s"] / total for name, value in run.stages.items()
            if name not in ("wall_s", "cache_build_s") and total > 0}
