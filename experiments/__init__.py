"""What measures advisor itself: benchmarks, reproductions and the reference workloads with
their planted bottlenecks (configs/ here; the templates a user copies are the top-level configs/)."""

import re
import shutil
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def config_path(name: str) -> Path:
    """A reference config by name: a template in configs/, or a planted one in experiments/configs/."""
    for folder in (ROOT / "configs", ROOT / "experiments" / "configs"):
        if (folder / f"{name}.yaml").exists():
            return folder / f"{name}.yaml"
    raise FileNotFoundError(f"no reference config {name!r} in configs/ or experiments/configs/")


CODE_REFERENCE = re.compile(r"^(?P<file>[^:\s]+\.py):(?P<name>\w+)$")


def code_references(value) -> list[str]:
    """The Python files a config's values name (`path/to/file.py:callable`), in order."""
    if isinstance(value, dict):
        return [file for item in value.values() for file in code_references(item)]
    if isinstance(value, list):
        return [file for item in value for file in code_references(item)]
    found = CODE_REFERENCE.match(value) if isinstance(value, str) else None
    return [found["file"]] if found else []


def made_local(value):
    """The config with each `path/to/file.py:callable` it names read as the file beside it."""
    if isinstance(value, dict):
        return {key: made_local(item) for key, item in value.items()}
    if isinstance(value, list):
        return [made_local(item) for item in value]
    found = CODE_REFERENCE.match(value) if isinstance(value, str) else None
    return f"{Path(found['file']).name}:{found['name']}" if found else value


def copied_with_its_code(config: Path, folder: Path) -> Path:
    """The config and its code copied into `folder`, as a user copies a template into an empty
    folder: the Python files beside the config and beside each file it names elsewhere (a planted
    config's `../workloads/x.py:build`), its references then made local; returns the copy's path."""
    raw = yaml.safe_load(config.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    code_folders = {config.parent.resolve()} | {(config.parent / file).resolve().parent for file in code_references(raw)}
    for code_folder in sorted(code_folders):
        for source in code_folder.glob("*.py"):
            shutil.copy(source, folder)
    if made_local(raw) == raw:
        shutil.copy(config, folder)  # its comments kept
    else:
        (folder / config.name).write_text(yaml.safe_dump(made_local(raw), sort_keys=False))
    return folder / config.name
