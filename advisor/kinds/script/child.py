"""The script kind's child side: the user's script run by its loop (`loop`), in a copy of the machine."""

from __future__ import annotations

from advisor.config import AdvisorConfig


def run_script(config: AdvisorConfig, spec: dict) -> dict:
    from advisor.kinds.script import loop

    return loop.run(config, spec["plan"], spec["mode"], spec["steps"], spec["scratch"], bool(spec.get("sandbox")))
