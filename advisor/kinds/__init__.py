"""Workload kinds: each kind of job advisor measures is one package here, registered once below.

A kind's package holds everything about it: its config section (`section`), its parent side
(the `Kind` in its `__init__`: which runs make its evidence, `derive`, its diagnosis `rules`,
its baseline plan, how two runs' results `compare`, its diagnosis `body`) and its child side
(`child`: the job loaded and run in a measurement child). The session, the diagnosis and the
report call a kind through `protocol.Kind` and never test a kind's name.

Adding a kind: a new package beside these, and one line in `KINDS` (and in `SECTIONS`, for a
kind the config names itself).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from advisor.config import load_config as read_config
from advisor.config import parse_config as validated
from advisor.kinds import distributed, infer, lightning, pipeline, script, train
from advisor.kinds.infer.section import InferWorkload
from advisor.kinds.lightning.section import LightningWorkload
from advisor.kinds.pipeline.section import PipelineWorkload
from advisor.kinds.script.section import ScriptWorkload, script_command
from advisor.kinds.train.section import TrainWorkload

if TYPE_CHECKING:
    from advisor.config import AdvisorConfig
    from advisor.kinds.protocol import Kind

# Every kind, by the name `AdvisorConfig.kind` gives: a section's own `kind:`, or the kind its
# settings choose (a training job with `distributed:` runs as ranks).
KINDS: dict[str, "Kind"] = {
    "train": train.KIND,
    "lightning": lightning.KIND,
    "script": script.KIND,
    "infer": infer.KIND,
    "pipeline": pipeline.KIND,
    "distributed": distributed.KIND,
}
# The `workload:` sections a config may hold, by their `kind:`.
SECTIONS: dict[str, type] = {
    "train": TrainWorkload, "lightning": LightningWorkload, "infer": InferWorkload, "pipeline": PipelineWorkload,
    "script": ScriptWorkload,
}
DEFAULT_KIND = "train"  # a workload that names no kind is one


def kind_of(config: "AdvisorConfig | str") -> "Kind":
    """The kind that measures a config's job (or the kind of that name)."""
    return KINDS[config if isinstance(config, str) else config.kind]


def forks_from_server(config: "AdvisorConfig") -> bool:
    """Whether the config's runs fork from the fork server: not a pipeline's (new interpreters)
    nor a data-parallel job's (its ranks start under torchrun)."""
    return not kind_of(config).fresh_children and getattr(config.workload, "distributed", None) is None


def load_config(path: str | Path) -> "AdvisorConfig":
    """Reads and validates a config file; raises `ConfigError` with a one-line message."""
    return read_config(path, SECTIONS, DEFAULT_KIND)


def parse_config(raw: Any, path: Path) -> "AdvisorConfig":
    """Validates an already-parsed mapping as the config at `path`."""
    return validated(raw, path, SECTIONS, DEFAULT_KIND)


def script_config(command: list[str], folder: Path) -> "AdvisorConfig":
    """`python SCRIPT ARGS`, run from `folder`, as a `kind: script` config rooted there."""
    name, raw = script_command(command, folder)
    return parse_config(raw, folder.resolve() / f"{name}.advisor.yaml")


def baseline_plan(config: "AdvisorConfig", seen: Optional[dict] = None) -> dict:
    """What the user runs today: the config's own settings, no fixes applied (`seen`: what the
    baseline's runs saw, for the settings only the user's code holds, such as a Lightning loader's)."""
    return kind_of(config).baseline_plan(config, seen)
