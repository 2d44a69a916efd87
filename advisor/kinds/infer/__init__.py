"""`kind: infer`: a model served request by request, judged by the latency its clients see.

Evidence: the replay under the configured load (percentiles, cold start, queueing) and an
operator profile per request; numerics: each plan's outputs on the same requests against the
baseline's. The objective a plan's `samples_per_s` carries is 1000 / p95 ms (objective p95)
or requests per second (objective throughput, with every plan kept under `constraints.p95_ms`),
so the search, the interleaved verification and its paired ratios apply unchanged: for p95
each round's ratio is the ratio of the two p95s.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional, Union

from advisor.config import AdvisorConfig
from advisor.evidence import Evidence
from advisor.failures import SLO_FAILURE
from advisor.kinds.infer.derive import derive_infer
from advisor.recipes import settings_off


def no_capacity(latency: dict) -> str:
    """Why a capacity search found no rate: the single-request p95 itself, or the rates tried."""
    found = latency.get("capacity", {})
    single, slo = found.get("single_p95_ms", 0.0), found.get("slo_ms", 0.0)
    if single > slo:
        return (f"one request at a time already takes {single:.1f} ms at p95, over constraints.p95_ms {slo:g} ms: "
                "no arrival rate keeps it")
    lowest = min((p["offered_per_s"] for p in found.get("points", [])), default=0.0)
    return f"even {lowest:,.1f} requests/s breaks constraints.p95_ms {slo:g} ms (one at a time: {single:.1f} ms at p95)"


class InferKind:
    name = "infer"
    recipe_family = "infer"
    evidence_runs = (
        ("full", "replaying the requests under the load, each one's latency recorded"),
        ("profile", "profiling operators per request (a separate, untimed run)"),
    )
    fresh_children = False
    strict_recipes = False
    per = "request"
    preload: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    prunable = True  # the replay reports its p95 (or requests/s) so far
    evidence_is_a_trial = False  # a trial keeps its outputs; the diagnosis does not

    def unit(self, config: AdvisorConfig) -> str:
        return {"p95": "/s (1000 / p95 ms)", "capacity": f"requests/s within {config.constraints.p95_ms or 0:g} ms p95"}.get(
            config.objective, "requests/s")

    def baseline_plan(self, config: AdvisorConfig, seen: Optional[dict] = None) -> dict:
        return {
            "threads.intra_op": config.workload.threads,  # the service's own threads
            "threads.inter_op": None,
            **settings_off("infer", taken=("threads",)),
        }

    def derive(self, evidence: Evidence) -> dict:
        return derive_infer(evidence.full, evidence.profile)

    def rules(self) -> tuple:
        from advisor.kinds.infer.rules import SERVING_RULES

        return SERVING_RULES

    def context(self, evidence: Evidence, bottlenecks: tuple[str, ...], config: AdvisorConfig):
        from advisor.measure import cpu_has_bf16
        from advisor.recipes import Context

        seen = self.seen(evidence)
        return Context(
            device=seen.get("device", "cpu"), cores=os.cpu_count() or 1,
            default_threads=seen.get("default_threads", os.cpu_count() or 1), blocks=0, cpu_bf16=cpu_has_bf16(),
            bottlenecks=bottlenecks, kind=self.recipe_family, grad_enabled=seen.get("grad_enabled_outputs", True),
            open_load=config.objective == "capacity" or (config.load.rate_per_s is not None and config.load.mode == "open"),
            concurrency=config.load.concurrency,
            batchable=seen.get("batchable", False), linear_layers=seen.get("linear_layers", 0),
            conv_layers=seen.get("conv_layers", 0), gpu_capability=seen.get("gpu_capability", 0.0),
            tf32_already=seen.get("tf32_already", False),
        )

    def measure(self, config: AdvisorConfig, capped: bool, fresh: Union[bool, str] = False):
        """Each plan keeps its outputs on the first requests, one file per plan; a plan whose p95
        breaks `constraints.p95_ms` is infeasible."""
        from advisor.harness import run_measurement
        from advisor.measure import Measurement
        from advisor.outputs import output_path

        limit = config.constraints.max_memory_mb if capped else None
        slo = config.constraints.p95_ms if capped else None

        def measure(plan: dict, watch=None) -> Measurement:
            run = run_measurement(config, plan, "full", 1, config.measure.timeout_s, limit,
                                  output_path=output_path(config, plan, ".pt"), watch=watch, fresh=fresh)
            if run.ok and config.objective == "capacity":  # its SLO is in the figure: no rate kept it, or some did
                return run if run.samples_per_s > 0 or slo is None else dataclasses.replace(
                    run, status="failed", reason=f"{SLO_FAILURE}: {no_capacity(run.latency)}")
            if run.ok and slo is not None and run.latency["p95_ms"] > slo:
                return dataclasses.replace(run, status="failed", reason=f"{SLO_FAILURE}: {run.latency['p95_ms']:.1f} ms "
                                                                        f"against constraints.p95_ms {slo:g} ms")
            return run

        return measure

    def envelope(self, config: AdvisorConfig, reference):
        return None  # outputs, not a trajectory: nothing amplifies rounding from one step to the next

    def compare(self, candidate, reference, risk: str, config: AdvisorConfig, envelope=None):
        from advisor.kinds.infer.compare import compare_served, nondeterministic_service
        from advisor.verify import foreign_output

        constraints = config.constraints
        refused = foreign_output(config, candidate, reference, risk, constraints.output_rtol) or \
            nondeterministic_service(reference, risk, constraints.output_rtol)
        return refused or compare_served(candidate.output.get("path"), reference.output.get("path"), risk,
                                         constraints.output_rtol, constraints.min_top1_agreement)

    def compared_runs(self, runs: list, reference_runs: list) -> tuple[list, list]:
        return runs[-1:], reference_runs[-1:]  # every run of a plan keeps the same outputs: compare them once

    def seen(self, evidence: Evidence) -> dict:
        return evidence.full.environment or evidence.profile.environment

    def sources(self, config: AdvisorConfig) -> dict[str, Any]:
        workload = config.workload
        return {"model": workload.model, "requests": workload.requests, "handler": workload.handler}

    def describe(self, evidence: Evidence, diagnoses: list) -> list[str]:
        from advisor.kinds.infer.body import serving_body

        return serving_body(evidence, diagnoses)


KIND = InferKind()
