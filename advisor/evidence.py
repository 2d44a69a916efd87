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


def collect_evidence(config: AdvisorConfig, progress: Progress = lambda line: None) -> Evidence:
    """Runs the measurements of the baseline plan for its kind, each in a fresh child."""
    from advisor.kinds import kind_of

    kind = kind_of(config.kind)
    plan = kind.baseline_plan(config)
    steps = {"profile": config.measure.profile_steps}
    runs = {}
    for index, (mode, what) in enumerate(kind.evidence_runs, start=1):
        progress(f"[{index}/{len(kind.evidence_runs)}] {what} ...")
        run = run_measurement(
            config, plan, mode, steps.get(mode, config.measure.steps), config.measure.timeout_s,
            fresh=kind.fresh_children,
        )
        runs[mode] = run
        progress(f"      {describe_run(run)}")
        if mode == "full":
            check_losses(run)
            check_capacity(run)
            if run.environment.get("parameters_changed") is False:
                progress(f"      warning: the model's parameters did not change over {config.measure.steps} timed steps: "
                         "does the step call optimizer.step()? advisor times what the step does, as it is")
    from advisor.fingerprint import fingerprint

    evidence = with_derived(Evidence(**runs, max_memory_mb=config.constraints.max_memory_mb, kind=config.kind))
    seen = fingerprint(config, kind.seen(evidence))["components"]
    return dataclasses.replace(evidence, workload=config.name, fingerprint=seen)


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


def with_derived(evidence: Evidence) -> Evidence:
    """Adds the derived quantities; a pure function of the runs."""
    from advisor.kinds import kind_of

    return dataclasses.replace(evidence, derived=kind_of(evidence.kind).derive(evidence))


def stage_shares(run: Measurement) -> dict:
    """Each stage's share of a pipeline run's wall time (setup such as a cache build excluded)."""
    total = run.stages.get("wall_s") or 0.0
    return {name: value["wall_s"] / total for name, value in run.stages.items()
            if name not in ("wall_s", "cache_build_s") and total > 0}


def derive_pipeline(full: Measurement, profile: Measurement) -> dict:
    """Stage shares; how much of the read is CPU (parsing) rather than waiting (storage); how
    much of the whole run is the user's Python called back row by row."""
    if not full.ok:
        return {}
    shares = stage_shares(full)
    read = full.stages.get("read", {})
    derived = {
        "rows_per_s": full.samples_per_s,
        "stage_shares": shares,
        "read_share": shares.get("read", 0.0),
        "read_cpu_over_wall": read.get("cpu_s", 0.0) / read["wall_s"] if read.get("wall_s") else 0.0,
        "transform_share": shares.get("transform", 0.0),
    }
    if profile.ok and profile.hotspots:
        spots = profile.hotspots
        # A row-wise call is Python overhead as a whole: the user's row function and the
        # library's per-row machinery (building a Series per row) alike.
        rowwise = max((c["caller"]["inclusive_share"] for c in spots.get("callbacks", [])), default=0.0)
        python = max(spots["python_share"], rowwise)
        derived.update(
            python_share_of_transform=python,
            callback_share_of_transform=spots["callback_share"],
            python_share=python * derived["transform_share"],
        )
    return derived


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
        overheads = {"dispatch_ms": "sample_dispatch_ms", "handoff_ms": "sample_handoff_ms", "worker_mb": "loader_worker_mb"}
        derived.update({name: probe[key] for key, name in overheads.items() if key in probe})  # the loader model's
    return derived


def derive_gpu(full: Measurement, profile: Measurement) -> dict:
    """On a GPU, each second of the step charged to one cause, the shares adding up to one: the
    GPU busy running kernels (the profile's kernel time a step), idle waiting on the next batch
    (the exposed data wait), idle on the host-to-device copy, and idle between kernels while the
    host launches them (the rest of the compute). {} off the GPU or without a kernel time."""
    kernel_ms = profile.operators.get("device_ms_per_step") if profile.ok else None
    if full.device != "cuda" or not full.ok or not full.step_ms_mean or kernel_ms is None:
        return {}
    wait, transfer = full.data_wait_share, full.transfer_share
    busy = min(kernel_ms / full.step_ms_mean, max(0.0, 1.0 - wait - transfer))
    return {
        "gpu_kernel_ms_per_step": kernel_ms,
        "gpu_busy_share": busy,
        "gpu_idle_input_share": wait,
        "gpu_idle_transfer_share": transfer,
        "gpu_idle_launch_share": max(0.0, 1.0 - busy - wait - transfer),
    }


def derive_infer(full: Measurement, profile: Measurement) -> dict:
    """Latency's shape (tail over median, the cold start over the median, the share spent
    queueing) and, for open load, how busy the server is (arrival rate x service time)."""
    if not full.ok or not full.latency:
        return {}
    lat = full.latency
    derived = {
        "p50_ms": lat["p50_ms"], "p95_ms": lat["p95_ms"], "p99_ms": lat["p99_ms"],
        "throughput_per_s": lat["throughput_per_s"], "cold_start_ms": lat["cold_start_ms"],
        "cold_over_p50": lat["cold_start_ms"] / lat["p50_ms"] if lat["p50_ms"] else 0.0,
        "tail_ratio": lat["p95_ms"] / lat["p50_ms"] if lat["p50_ms"] else 0.0,
        "service_tail_ratio": lat["service_ms_p95"] / lat["service_ms_p50"] if lat["service_ms_p50"] else 0.0,
        "queue_share": lat["queue_share"], "service_ms_p50": lat["service_ms_p50"], "mean_batch": lat["mean_batch"],
    }
    if lat.get("rate_per_s"):  # open load
        derived["utilisation"] = lat["rate_per_s"] * lat["service_ms_p50"] / 1000
    if profile.ok and profile.operators:
        derived["ops_per_request"] = profile.operators.get("ops_per_step", 0.0)
    return derived
