"""The pipeline kind's child side: the transform and combine resolved, then run by its loop (`loop`)."""

from __future__ import annotations

from pathlib import Path

from advisor.config import AdvisorConfig
from advisor.workload import resolve_callable


def load_pipeline(config: AdvisorConfig):
    """Resolves a pipeline's transform and combine."""
    import inspect

    from advisor.kinds.pipeline.loop import PipelineCode

    spec = config.workload
    transform = resolve_callable(spec.transform, config.root, "workload.transform")
    combine = resolve_callable(spec.combine, config.root, "workload.combine") if spec.combine else None
    roots = {str(config.root)}
    for fn in (transform, combine):
        source = inspect.getsourcefile(fn) if fn is not None else None
        if source:
            roots.add(str(Path(source).resolve().parent))
    return PipelineCode(transform=transform, combine=combine, roots=tuple(sorted(roots)))


def run_pipeline(config: AdvisorConfig, spec: dict) -> dict:
    from advisor.kinds.pipeline import loop

    return loop.run(config, load_pipeline(config), spec["plan"], spec["mode"], spec.get("output"),
                        spec.get("scratch"))
