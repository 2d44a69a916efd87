"""`kind: script`: an unmodified training script (`advisor.harness.script` runs it).

Evidence: the full run, whose DataLoader waits (where the script has a DataLoader) are the
input's share of each step, and an operator profile of the same steps. Only recipes that apply
from outside the code are tried (`recipe_family` "script": threads, the allocator, amp); the
rate is the script's steps per second, as it sets its own batch size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from advisor.config import AdvisorConfig
from advisor.evidence import Evidence
from advisor.kinds.train import FIXES_OFF, TrainKind


class ScriptKind(TrainKind):
    name = "script"
    recipe_family = "script"
    evidence_runs = (
        ("full", "timing the script's steps"),
        ("profile", "profiling operators (a separate, untimed run)"),
    )
    memory_fixes = ("amp",)

    def unit(self, config: AdvisorConfig) -> str:
        return "steps/s"

    def baseline_plan(self, config: AdvisorConfig, seen: Optional[dict] = None) -> dict:
        return {"threads.intra_op": config.workload.threads, **FIXES_OFF}

    def derive(self, evidence: Evidence) -> dict:
        return derive_script(evidence.full)

    def step_of(self, config: AdvisorConfig) -> str:
        return ""

    def seen(self, evidence: Evidence) -> dict:
        return evidence.full.environment or {}

    def sources(self, config: AdvisorConfig) -> dict[str, Any]:
        return {"script": Path(config.workload.script)}


def derive_script(full) -> dict:
    """The training rules' quantities from the one run there is: the ideal is the step without
    its DataLoader waits (a script's batches cannot be replayed from outside)."""
    if not full.ok or not full.samples_per_s:
        return {}
    wait = full.data_wait_share
    return {
        "ideal_samples_per_s": full.samples_per_s / max(1e-9, 1 - wait),
        "actual_samples_per_s": full.samples_per_s,
        "ideal_step_ms": full.step_ms_mean * (1 - wait),
        "actual_step_ms": full.step_ms_mean,
        "stall_share": wait,
        "exposed_wait_share": wait,
        "ideal_over_actual": 1 / max(1e-9, 1 - wait),
    }


KIND = ScriptKind()
