"""`kind: train` with `distributed:`: data-parallel training, its ranks started by torchrun on
every node (`advisor.harness.ranks`), the model in DistributedDataParallel.

Evidence: the full run, the same steps with communication removed (`local`: each rank keeps
its own gradient; the compute-alone ideal) and an operator profile; from them the share of the
step spent waiting on the network, the bytes all-reduced per step and the bandwidth one
all-reduce of that size achieves. Numerics: rank 0's losses, and every rank's parameters equal.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from advisor.config import AdvisorConfig
from advisor.evidence import Evidence
from advisor.kinds.distributed.derive import derive_communication
from advisor.kinds.train import TrainKind


class DistributedKind(TrainKind):
    name = "distributed"
    recipe_family = "distributed"
    evidence_runs = (
        ("full", "timing the ranks as they run"),
        ("local", "timing the same steps without communication"),
        ("profile", "profiling operators (a separate, untimed run)"),
    )
    prunable = False  # the ranks report no running rate to the parent
    off_family = "distributed"  # the training recipes' settings and DistributedDataParallel's, off

    def baseline_plan(self, config: AdvisorConfig, seen: Optional[dict] = None) -> dict:
        distributed = config.workload.distributed
        return {
            **super().baseline_plan(config, seen),
            # the user's DistributedDataParallel(...) settings
            "ddp.bucket_cap_mb": distributed.bucket_cap_mb,
            "ddp.find_unused_parameters": distributed.find_unused_parameters,
        }

    def derive(self, evidence: Evidence) -> dict:
        return derive_communication(evidence.full, evidence.local)

    def rules(self) -> tuple:
        from advisor.kinds.distributed.rules import DISTRIBUTED_RULES

        return DISTRIBUTED_RULES

    def context(self, evidence: Evidence, bottlenecks: tuple[str, ...], config: AdvisorConfig):
        context = super().context(evidence, bottlenecks, config)
        distributed = config.workload.distributed
        return dataclasses.replace(context, find_unused_parameters=distributed.find_unused_parameters,
                                   bucket_cap_mb=distributed.bucket_cap_mb)

    def describe(self, evidence: Evidence, diagnoses: list) -> list[str]:
        from advisor.kinds.distributed.body import distributed_body

        return distributed_body(evidence, diagnoses)


KIND = DistributedKind()
