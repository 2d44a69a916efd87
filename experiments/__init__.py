"""What measures advisor itself: benchmarks, reproductions and the reference workloads with
their planted bottlenecks (configs/ here; the templates a user copies are the top-level configs/)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def config_path(name: str) -> Path:
    """A reference config by name: a template in configs/, or a planted one in experiments/configs/."""
    for folder in (ROOT / "configs", ROOT / "experiments" / "configs"):
        if (folder / f"{name}.yaml").exists():
            return folder / f"{name}.yaml"
    raise FileNotFoundError(f"no reference config {name!r} in configs/ or experiments/configs/")
