"""The differential runs behind a diagnosis, and the quantities derived from them.

full (fetch + prep + compute), cached (compute + batching), synthetic (compute only) and a
separate profiler run, each in its own child. From them: the ideal step time, the stall share,
and the split of the input work into fetch (off-CPU per-sample time) and prep (on-CPU time).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Optional

from advisor.config import AdvisorConfig
from advisor.harness import run_measurement
from advisor.measure import Measurement
from advisor.plan import baseline_plan

Progress = Callable[[str], None]

RUNS = (
    ("full", "timing the full pipeline"),
    ("synthetic", "timing compute alone on one reused batch"),
    ("cached", "timing with samples cached in memory"),
    ("profile", "profiling operators (a separate, untimed run)"),
)


@dataclass(frozen=True)
class Evidence:
    """Everything the diagnosis reads: the runs and what follows from them."""

    full: Measurement
    synthetic: Measurement
    cached: Measurement
    profile: Measurement
    max_memory_mb: Optional[float] = None
    derived: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "runs": {m.mode: m.to_dict() for m in (self.full, self.synthetic, self.cached, self.profile)},
            "max_memory_mb": self.max_memory_mb,
            "derived": self.derived,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Evidence":
        runs = {mode: Measurement.from_dict(run) for mode, run in data["runs"].items()}
        return cls(**runs, max_memory_mb=data.get("max_memory_mb"), derived=data.get("derived", {}))


def collect_evidence(config: AdvisorConfig, progress: Progress = lambda line: None) -> Evidence:
    """Runs the four measurements of the baseline plan, each in a fresh child."""
    plan = baseline_plan(config)
    steps = {"profile": config.measure.profile_steps}
    runs = {}
    for index, (mode, what) in enumerate(RUNS, start=1):
        progress(f"[{index}/{len(RUNS)}] {what} ...")
        run = run_measurement(
            config.path, plan, mode, steps.get(mode, config.measure.steps), config.measure.timeout_s
        )
        runs[mode] = run
        progress(f"      {describe_run(run)}")
    return with_derived(Evidence(**runs, max_memory_mb=config.constraints.max_memory_mb))


def describe_run(run: Measurement) -> str:
    if not run.ok:
        return f"failed: {run.reason}"
    if run.mode == "profile":
        ops = run.operators
        return f"{ops.get('ops_per_step', 0):.0f} operators per step, {run.wall_s:.1f} s"
    return f"{run.samples_per_s:,.0f} samples/s, step p50 {run.step_ms_p50:.1f} ms, {run.wall_s:.1f} s"


def with_derived(evidence: Evidence) -> Evidence:
    """Adds the derived quantities; a pure function of the runs."""
    return dataclasses.replace(evidence, derived=derive(evidence.full, evidence.synthetic, evidence.cached))


def derive(full: Measurement, synthetic: Measurement, cached: Measurement) -> dict:
    """Ideal throughput, stall share and the fetch/prep split of the input work.

    The split uses only quantities measured inside one run (the per-sample probe and the cached
    run's own batching wait), never the difference of two runs' timings, which machine drift
    between the runs would corrupt.
    """
    if not (full.ok and synthetic.ok):
        return {}
    full_ms, ideal_ms = full.step_ms_mean, synthetic.step_ms_mean
    derived = {
        "ideal_samples_per_s": synthetic.samples_per_s,
        "actual_samples_per_s": full.samples_per_s,
        "ideal_step_ms": ideal_ms,
        "actual_step_ms": full_ms,
        "stall_share": max(0.0, full_ms - ideal_ms) / full_ms if full_ms else 0.0,
        "exposed_wait_share": full.data_wait_share,
        "ideal_over_actual": synthetic.samples_per_s / full.samples_per_s if full.samples_per_s else 0.0,
    }
    if cached.ok and cached.sample_probe and full.samples:
        probe = cached.sample_probe
        batch = full.samples_per_s * full_ms / 1000  # samples per step
        cpu_ms = min(probe["cpu_ms"], probe["wall_ms"])
        fetch_ms = batch * (probe["wall_ms"] - cpu_ms)
        prep_ms = batch * cpu_ms + cached.data_wait_share * cached.step_ms_mean  # + batching
        derived.update(
            sample_wall_ms=probe["wall_ms"],
            sample_cpu_ms=probe["cpu_ms"],
            fetch_ms_per_step=fetch_ms,
            prep_ms_per_step=prep_ms,
            fetch_share_of_input=fetch_ms / (fetch_ms + prep_ms) if fetch_ms + prep_ms > 0 else 0.0,
        )
    return derived
