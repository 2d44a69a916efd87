"""`kind: pipeline`: a pandas pipeline (read, transform, combine, write).

Evidence: one timed run by stage and a line profile of the transform; numerics: the output
frame against the baseline's. Its children start fresh interpreters and never import torch,
whose pages would count in the peak.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from advisor.config import AdvisorConfig
from advisor.evidence import Evidence
from advisor.kinds.pipeline.derive import derive_pipeline
from advisor.recipes import settings_off


class PipelineKind:
    name = "pipeline"
    preload: tuple[str, ...] = ()
    packages: tuple[str, ...] = ("pandas",)
    recipe_family = "pipeline"
    evidence_runs = (
        ("full", "timing each stage: read, transform, combine, write"),
        ("profile", "profiling the transform by source line, and the columns it reads (untimed)"),
    )
    fresh_children = True
    strict_recipes = True
    per = "run"
    prunable = False
    evidence_is_a_trial = False  # a trial keeps its output; the diagnosis does not

    def unit(self, config: AdvisorConfig) -> str:
        return "rows/s"

    def baseline_plan(self, config: AdvisorConfig, seen: Optional[dict] = None) -> dict:
        from advisor.kinds.pipeline.loop import source_format_of

        source = config.workload.source
        return {
            "pipeline.format": source_format_of(source),  # not tuned: the snippets' reader
            **settings_off("pipeline"),
            # what the user passes to the reader today
            "pipeline.engine": source.read_args.get("engine"),
            "pipeline.dtype_backend": source.read_args.get("dtype_backend"),
        }

    def derive(self, evidence: Evidence) -> dict:
        return derive_pipeline(evidence.full, evidence.profile)

    def rules(self) -> tuple:
        from advisor.kinds.pipeline.rules import PIPELINE_RULES

        return PIPELINE_RULES

    def context(self, evidence: Evidence, bottlenecks: tuple[str, ...], config: AdvisorConfig):
        from advisor.recipes import Context

        seen = evidence.profile.environment
        row_functions = seen.get("row_functions", [])
        return Context(
            device="cpu", cores=os.cpu_count() or 1, default_threads=1, blocks=0, cpu_bf16=False,
            bottlenecks=bottlenecks, kind=self.recipe_family, source_format=seen.get("format", ""),
            partition_safe=config.workload.partition_safe, rows=seen.get("rows", 0),
            columns=tuple(seen.get("columns", ())), used_columns=tuple(seen.get("used_columns", ())),
            category_columns=tuple(seen.get("category_columns", ())),
            missing_text_columns=tuple(seen.get("missing_text_columns", ())), dask_scheduler=config.workload.dask.scheduler,
            rewrites=tuple((f["where"], f["rewrite"]) for f in row_functions if f["status"] == "equal"),
            rewrite_problems=tuple(f"{f['name']} ({f['where']}): {f['detail']}" for f in row_functions if f["status"] != "equal"),
        )

    def measure(self, config: AdvisorConfig, capped: bool, fresh: bool = True):
        """Each run keeps its output, one file per plan, for the comparison with the baseline's
        (always in a fresh interpreter: `fresh_children`)."""
        from advisor.harness import run_measurement
        from advisor.outputs import output_path

        limit = config.constraints.max_memory_mb if capped else None

        def measure(plan: dict):
            return run_measurement(config, plan, "full", 1, config.measure.timeout_s, limit,
                                   output_path=output_path(config, plan, ".parquet"), fresh=True)

        return measure

    def envelope(self, config: AdvisorConfig, reference):
        return None  # outputs, not a trajectory: nothing amplifies rounding from one step to the next

    def compare(self, candidate, reference, risk: str, config: AdvisorConfig, envelope=None):
        from advisor.kinds.pipeline.compare import compare_frames
        from advisor.verify import foreign_output

        workload = config.workload  # a path from a shared study is only data: read from advisor's folder alone
        refused = foreign_output(config, candidate, reference, risk, workload.float_rtol)
        return refused or compare_frames(candidate.output.get("path"), reference.output.get("path"), risk,
                                         workload.float_rtol, workload.order_matters)

    def compared_runs(self, runs: list, reference_runs: list) -> tuple[list, list]:
        return runs[-1:], reference_runs[-1:]  # every run of a plan writes the same output file: compare it once

    def seen(self, evidence: Evidence) -> dict:
        return {**evidence.full.environment, **evidence.profile.environment}

    def sources(self, config: AdvisorConfig) -> dict[str, Any]:
        return {"transform": config.workload.transform, "combine": config.workload.combine}

    def describe(self, evidence: Evidence, diagnoses: list) -> list[str]:
        from advisor.kinds.pipeline.body import pipeline_body

        return pipeline_body(evidence, diagnoses)


KIND = PipelineKind()
