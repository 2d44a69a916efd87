"""`kind: train`: a PyTorch training loop, from the user's builders (and their own step, loss,
collate function and optimizer, where they give them).

Evidence: the differential runs (full, synthetic, cached) and an operator profile; numerics:
the seeded loss trajectory and, for exact recipes, the parameters after the same steps.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

from advisor.config import AdvisorConfig
from advisor.evidence import Evidence
from advisor.kinds.train.derive import derive, derive_gpu
from advisor.recipes import settings_off

LOADER_DEFAULTS = {"dataloader.prefetch_factor": 2}


# The recipes whose settings a training baseline takes from the job itself (its loader, its threads).
TAKEN_FROM_THE_JOB = ("dataloader", "threads")


class TrainKind:
    name = "train"
    # an optimizer's first step imports the compiler stack (torch._dynamo: 2 s of a new interpreter's
    # 4 s here), so every training child would; a service or a pipeline never steps one
    preload: tuple[str, ...] = ("torch._dynamo",)
    packages: tuple[str, ...] = ()
    off_family = "train"  # whose recipes' settings the baseline spells off (a script, too, trains)
    recipe_family = "train"
    evidence_runs = (
        ("full", "timing the full pipeline"),
        ("synthetic", "timing compute alone on one reused batch"),
        ("cached", "timing with samples cached in memory"),
        ("profile", "profiling operators (a separate, untimed run)"),
    )
    fresh_children = False
    strict_recipes = False
    per = "step"
    prunable = True
    evidence_is_a_trial = True

    def unit(self, config: AdvisorConfig) -> str:
        return "samples/s"

    def baseline_plan(self, config: AdvisorConfig, seen: Optional[dict] = None) -> dict:
        workload = config.workload
        loader = workload.dataloader
        return {
            "dataloader.num_workers": loader.num_workers,
            "dataloader.prefetch_factor": loader.prefetch_factor,
            "dataloader.pin_memory": loader.pin_memory,
            "dataloader.persistent_workers": loader.persistent_workers,
            "threads.intra_op": workload.threads,
            **settings_off(self.off_family, TAKEN_FROM_THE_JOB),
            "batch_size": workload.batch_size,
        }

    def derive(self, evidence: Evidence) -> dict:
        return {**derive(evidence.full, evidence.synthetic, evidence.cached), **derive_gpu(evidence.full, evidence.profile)}

    def rules(self) -> tuple:
        from advisor.kinds.train.rules import TRAINING_RULES

        return TRAINING_RULES

    def context(self, evidence: Evidence, bottlenecks: tuple[str, ...], config: AdvisorConfig):
        from advisor.measure import cpu_has_bf16
        from advisor.recipes import Context

        environment = self.seen(evidence)
        return Context(
            device=environment.get("device", "cpu"),
            cores=os.cpu_count() or 1,
            default_threads=environment.get("default_threads", os.cpu_count() or 1),
            blocks=environment.get("blocks", 0),
            cpu_bf16=cpu_has_bf16(),
            bottlenecks=bottlenecks,
            batch_stat_layers=environment.get("batch_stat_layers", 0),
            kind=self.recipe_family,
            step=self.step_of(config),
            optimizer=optimizer_name(config),
            conv_layers=environment.get("conv_layers", 0),
            gpu_capability=environment.get("gpu_capability", 0.0),
            tf32_already=environment.get("tf32_already", False),
        )

    def step_of(self, config: AdvisorConfig) -> str:
        """Whose step runs: advisor's own, or the name of the user's."""
        step = config.workload.step
        if step is None:
            return ""
        return step.rsplit(":", 1)[-1] if isinstance(step, str) else getattr(step, "__name__", "train_step")

    def measure(self, config: AdvisorConfig, capped: bool, fresh: Union[bool, str] = False):
        from advisor.harness import run_measurement

        limit = config.constraints.max_memory_mb if capped else None

        def measure(plan: dict, watch=None, epoch_end_s=None):
            return run_measurement(config, plan, "full", config.measure.steps, config.measure.timeout_s, limit, watch=watch,
                                   fresh=fresh, epoch_end_s=epoch_end_s)

        return measure

    def compare(self, candidate, reference, risk: str, config: AdvisorConfig, envelope=None):
        from advisor.kinds.train.compare import compare_training

        return compare_training(candidate, reference, risk, config.constraints.loss_rtol, envelope)

    def envelope(self, config: AdvisorConfig, reference):
        """How far rounding alone moves the loss: the reference's plan run again, uncapped, its
        weights nudged by one unit in the last place."""
        from advisor.harness import run_measurement
        from advisor.verify import envelope_of

        nudged = run_measurement(config, reference.plan, "nudged", config.measure.steps, config.measure.timeout_s)
        return envelope_of(nudged, reference)

    def compared_runs(self, runs: list, reference_runs: list) -> tuple[list, list]:
        return runs, reference_runs

    def seen(self, evidence: Evidence) -> dict:
        return evidence.full.environment or (evidence.synthetic.environment if evidence.synthetic else {})

    def sources(self, config: AdvisorConfig) -> dict[str, Any]:
        workload = config.workload
        return {key: getattr(workload, key) for key in ("model", "dataset", "loss", "collate", "step")}

    def describe(self, evidence: Evidence, diagnoses: list) -> list[str]:
        from advisor.kinds.train.body import training_body

        return training_body(evidence, diagnoses)


def optimizer_name(config: AdvisorConfig) -> str:
    """The optimizer class advisor builds from `workload.optimizer: {name: ...}`; "" where the
    user's own code builds it (a builder, Lightning's configure_optimizers, a script)."""
    spec = getattr(config.workload, "optimizer", None)
    return str(spec["name"]).rsplit(".", 1)[-1] if isinstance(spec, dict) and spec.get("name") else ""



KIND = TrainKind()
