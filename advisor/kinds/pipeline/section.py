"""`workload: {kind: pipeline}`: a pandas pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, Optional

from advisor.config import Invalid, Ref, WorkloadSection, callable_ref, checked, non_negative


@dataclass(frozen=True)
class SourceConfig:
    path: str  # a file or a glob, relative to the config's folder
    format: Optional[Literal["csv", "parquet", "jsonl"]] = None  # None: from the files' suffix
    read_args: dict = field(default_factory=dict)  # what the user passes to the reader today


@dataclass(frozen=True)
class DaskConfig:
    scheduler: Optional[str] = None  # a running cluster's scheduler address; None: a LocalCluster


@dataclass(frozen=True)
class PipelineWorkload(WorkloadSection):
    """A pandas pipeline: read the source, transform it, combine partial results, write the sink."""

    source: SourceConfig  # what the pipeline reads
    transform: Ref = checked(callable_ref)  # DataFrame -> DataFrame
    kind: Literal["pipeline"] = "pipeline"  # a pandas pipeline
    RECIPES: ClassVar[str] = "pipeline"
    partition_safe: bool = False  # transform(concat(parts)) == combine([transform(p) for p in parts])
    combine: Optional[Ref] = checked(callable_ref, default=None)  # list of partial frames -> frame
    sink: Optional[str] = None  # an output file (.parquet or .csv), relative to the config's folder
    order_matters: bool = True  # False: outputs are compared as sets of rows
    float_rtol: float = checked(non_negative, default=1e-9)  # float tolerance for output equality
    dask: DaskConfig = field(default_factory=DaskConfig)  # where the dask recipe runs

    def run_child(self, config, spec: dict) -> dict:
        from advisor.kinds.pipeline.child import run_pipeline

        return run_pipeline(config, spec)

    def check(self, root: Path) -> None:
        _check_sink(self, root)


def _check_sink(workload: "PipelineWorkload", root: Path) -> None:
    """The sink is written by the user's job, never by advisor; still, one in a folder that does
    not exist, or one that is the source itself, is a job that cannot run as configured."""
    if not workload.sink:
        return
    sink = (root / workload.sink).resolve()
    if not sink.parent.is_dir():
        raise Invalid("workload.sink", f"its folder {sink.parent} does not exist; create it, or name a sink in "
                                       "an existing folder")
    source = Path(workload.source.path)
    sources = {p.resolve() for p in (source if source.is_absolute() else root / source).parent.glob(source.name)}
    if sink in sources or sink == (root / source).resolve():
        raise Invalid("workload.sink", f"{workload.sink} is the source itself; the job would overwrite its input: "
                                       "name another file")
