"""What measures advisor itself: benchmarks, reproductions and the reference workloads with
their planted bottlenecks (configs/ here; the templates a user copies are the top-level configs/)."""

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def config_path(name: str) -> Path:
    """A reference config by name: a template in configs/, or a planted one in experiments/configs/."""
    for folder in (ROOT / "configs", ROOT / "experiments" / "configs"):
        if (folder / f"{name}.yaml").exists():
            return folder / f"{name}.yaml"
    raise FileNotFoundError(f"no reference config {name!r} in configs/ or experiments/configs/")


def copied_with_its_code(config: Path, folder: Path) -> Path:
    """The config and the Python files beside it copied into `folder`, as a user copies a
    template into an empty folder; returns the copy's path."""
    for source in [config, *config.parent.glob("*.py")]:
        shutil.copy(source, folder)
    return folder / config.name
