"""What measures advisor itself: benchmarks, reproductions and the reference workloads with
their planted bottlenecks (configs/ here; the templates a user copies are the top-level configs/)."""

import shutil
from pathlib import Path

import yaml

from advisor.config import CALLABLE_PATTERN

ROOT = Path(__file__).resolve().parent.parent


def config_path(name: str) -> Path:
    """A reference config by name: a template in configs/, or a planted one in experiments/configs/."""
    for folder in (ROOT / "configs", ROOT / "experiments" / "configs"):
        if (folder / f"{name}.yaml").exists():
            return folder / f"{name}.yaml"
    raise FileNotFoundError(f"no reference config {name!r} in configs/ or experiments/configs/")


def made_local(workload: dict) -> dict[str, str]:
    """Each `path/to/file.py:callable` the workload section names, and what it reads once the file
    lies beside the config (every code reference of a config is a value of its workload section)."""
    found = {value: CALLABLE_PATTERN.match(value) for value in workload.values() if isinstance(value, str)}
    return {value: f"{Path(match['module']).name}.py:{match['attr']}" for value, match in found.items()
            if match and match["file"]}


def copied_with_its_code(config: Path, folder: Path) -> Path:
    """The config and its code copied into `folder`, as a user copies a template into an empty
    folder: the Python files beside the config and beside each file it names elsewhere (a planted
    config's `../workloads/x.py:build`), its references then made local; returns the copy's path."""
    raw = yaml.safe_load(config.read_text())
    local = made_local(raw["workload"])
    folder.mkdir(parents=True, exist_ok=True)
    named = {(config.parent / reference.rsplit(":", 1)[0]).resolve().parent for reference in local}
    for code_folder in sorted({config.parent.resolve()} | named):
        for source in code_folder.glob("*.py"):
            shutil.copy(source, folder)
    if all(reference == local_reference for reference, local_reference in local.items()):
        shutil.copy(config, folder)  # its comments kept
    else:
        raw["workload"] = {key: local.get(value, value) if isinstance(value, str) else value
                           for key, value in raw["workload"].items()}
        (folder / config.name).write_text(yaml.safe_dump(raw, sort_keys=False))
    return folder / config.name
