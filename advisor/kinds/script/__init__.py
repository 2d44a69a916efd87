"""`kind: script`: an unmodified training script (`loop` runs it).

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
from advisor.kinds.script.derive import derive_script
from advisor.kinds.train import TAKEN_FROM_THE_JOB, TrainKind
from advisor.recipes import settings_off


class ScriptKind(TrainKind):
    name = "script"
    recipe_family = "script"
    evidence_runs = (
        ("full", "timing the script's steps"),
        ("synthetic", "timing compute alone: the script's first batch replayed"),
        ("profile", "profiling operators (a separate, untimed run)"),
    )

    def unit(self, config: AdvisorConfig) -> str:
        return "steps/s"

    def baseline_plan(self, config: AdvisorConfig, seen: Optional[dict] = None) -> dict:
        # the script's own DataLoader settings once seen; before (the evidence runs), left as it builds them
        return {**(seen or {}).get("loader", {}), "threads.intra_op": config.workload.threads,
                **settings_off(self.off_family, TAKEN_FROM_THE_JOB)}

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


KIND = ScriptKind()
