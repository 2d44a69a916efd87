import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(FIXTURES))  # the fixture modules (tables, broken) import as top-level modules

TINY = {
    "name": "tiny",
    "workload": {"model": "broken:model", "dataset": "broken:dataset", "batch_size": 8},
    "measure": {"warmup_steps": 1, "steps": 4, "profile_steps": 2, "timeout_s": 60},
}


def merged(base: dict, changes: dict) -> dict:
    """A deep copy of `base` with `changes` merged in; a None value removes the key."""
    result = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)  # never shared with the caller's constants
    return result


def write_config(folder: Path, config, name: str = "config.yaml") -> Path:
    """Writes a config (a mapping, or raw YAML text) beside copies of the fixture modules."""
    for fixture in FIXTURES.glob("*.py"):
        (folder / fixture.name).write_text(fixture.read_text())
    path = folder / name
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    return path


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "advisor.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "PYTHONUNBUFFERED": "1"},
    )


@pytest.fixture
def tiny_config(tmp_path):
    """Makes a tiny config with changes merged into `TINY`; returns its path."""

    def make(**changes) -> Path:
        return write_config(tmp_path, merged(TINY, changes))

    return make
