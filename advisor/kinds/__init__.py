"""Workload kinds: each kind of job advisor measures is one module behind `Kind` (`protocol`).

A kind (the parent's side of a job; the child's side is its loop in `advisor.harness`, loaded
by `advisor.workload`) knows which runs make its evidence and what follows from them, which
diagnosis rules apply, what its baseline plan is, how two runs' results are compared, and what
its fingerprint covers. `kind_of` picks the kind once, from the config's `workload.kind`; the
session, the diagnosis and the report call through the interface and never test a kind's name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from advisor.config import AdvisorConfig
    from advisor.kinds.protocol import Kind


def kind_of(name: str) -> Kind:
    """The kind named by a config's `kind` (validated by the config), registered once
    (`config.KIND_MODULES`); its module is imported on first use."""
    from advisor.config import KIND_MODULES

    return importlib.import_module(KIND_MODULES[name]).KIND


def baseline_plan(config: "AdvisorConfig", seen: Optional[dict] = None) -> dict:
    """What the user runs today: the config's own settings, no fixes applied (`seen`: what the
    baseline's runs saw, for the settings only the user's code holds, such as a Lightning loader's)."""
    return kind_of(config.kind).baseline_plan(config, seen)
