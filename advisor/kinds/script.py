"""`kind: script`: an unmodified training script (`advisor.harness.script` runs it).

Evidence: the full run, whose DataLoader waits (where the script has a DataLoader) are the
input's share of each step; the synthetic run, its first batch replayed through the loader
(compute alone); and an operator profile of the same steps. Only recipes that apply
from outside the code are tried (`recipe_family` "script": threads, the allocator, amp, compile
in place, the DataLoader's workers); checkpointing would need the script's code changed, and
the report says so. Snippets are anchored at the script's own lines. The rate is the script's steps
per second, as it sets its own batch size.
"""

from __future__ import annotations

import ast
import dataclasses
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
        ("synthetic", "timing compute alone: the script's first batch replayed"),
        ("profile", "profiling operators (a separate, untimed run)"),
    )
    memory_fixes = ("amp",)

    def unit(self, config: AdvisorConfig) -> str:
        return "steps/s"

    def baseline_plan(self, config: AdvisorConfig, seen: Optional[dict] = None) -> dict:
        # the script's own DataLoader settings once seen; before (the evidence runs), left as it builds them
        return {**(seen or {}).get("loader", {}), "threads.intra_op": config.workload.threads, **FIXES_OFF}

    def context(self, evidence: Evidence, bottlenecks: tuple[str, ...], config: AdvisorConfig):
        environment = self.seen(evidence)
        return dataclasses.replace(super().context(evidence, bottlenecks, config),
                                   loader_call=tuple(environment.get("loader_call") or ()),
                                   forward_call=tuple(environment.get("forward_call") or ()))

    def derive(self, evidence: Evidence) -> dict:
        return derive_script(evidence.full, evidence.synthetic)

    def step_of(self, config: AdvisorConfig) -> str:
        return ""

    def seen(self, evidence: Evidence) -> dict:
        return evidence.full.environment or {}

    def sources(self, config: AdvisorConfig) -> dict[str, Any]:
        script = config.root / config.workload.script
        return {"script": script, **{f"module {name}": path for name, path in local_imports(script).items()}}


def local_imports(script: Path) -> dict[str, Path]:
    """The modules the script imports from its own folder, and theirs in turn, by name: their
    code is the job's too (read from the source; an import made at run time by name is not seen)."""
    found: dict[str, Path] = {}
    pending = [script]
    while pending:
        try:
            tree = ast.parse(pending.pop().read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                top = name.split(".")[0]
                path = next((candidate for candidate in (script.parent / f"{top}.py", script.parent / top / "__init__.py")
                             if candidate.is_file()), None)
                if path is not None and top not in found:
                    found[top] = path
                    pending.append(path)
    return dict(sorted(found.items()))


def derive_script(full, synthetic) -> dict:
    """The training rules' quantities: the ideal is the replayed run's step where the script has
    a DataLoader, else the full step without its waits. Where the main process loads the
    batches, a sample's load time off the CPU is the fetch (storage) share."""
    if not full.ok or not full.samples_per_s:
        return {}
    replayed = synthetic.ok and synthetic.samples_per_s and "loader" in (synthetic.environment or {})
    ideal_ms = synthetic.step_ms_mean if replayed else full.step_ms_mean * (1 - full.data_wait_share)
    wait = max(0.0, 1 - ideal_ms / full.step_ms_mean)
    probe = full.sample_probe
    split = {}
    if probe and probe["wall_ms"] > 0:
        cpu_ms = min(probe["cpu_ms"], probe["wall_ms"])
        split = {"sample_wall_ms": probe["wall_ms"], "sample_cpu_ms": probe["cpu_ms"],
                 "fetch_share_of_input": 1 - cpu_ms / probe["wall_ms"]}
    return {
        "ideal_samples_per_s": full.samples_per_s / max(1e-9, 1 - wait),
        "actual_samples_per_s": full.samples_per_s,
        "ideal_step_ms": ideal_ms,
        "actual_step_ms": full.step_ms_mean,
        "stall_share": wait,
        "exposed_wait_share": full.data_wait_share,
        "ideal_over_actual": 1 / max(1e-9, 1 - wait),
        **split,
    }


KIND = ScriptKind()
