"""YAML config -> validated, frozen `AdvisorConfig`.

Every error is one line that names the file, the key path and what was expected, so a user
can fix it without reading a traceback. Unknown keys are errors, with the nearest valid key
suggested. Validation is generic over the dataclasses below: their type hints are the schema.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

import yaml

from advisor.errors import ConfigError
from advisor.secrets import expanded, unset_variables

CALLABLE_PATTERN = re.compile(r"^(?P<module>[\w.\-/]+?)(?P<file>\.py)?:(?P<attr>[A-Za-z_]\w*)$")


_positive = (lambda v: v >= 1, "a number >= 1")
_above_zero = (lambda v: v > 0, "a number > 0")  # a latency: services here answer in 0.05-4 ms
_non_negative = (lambda v: v >= 0, "a number >= 0")
# A reference to the user's code: 'module:callable' or 'file.py:callable' in a file; through the
# Python API, also the callable itself.
Ref = Any
_callable_ref = (lambda v: callable(v) or (isinstance(v, str) and bool(CALLABLE_PATTERN.match(v))),
                 "'module:callable' or 'path/to/file.py:callable'")


def _check(check, **kwargs):
    """A dataclass field with an extra (predicate, description) check run after its type matched."""
    return field(metadata={"check": check}, **kwargs)


@dataclass(frozen=True)
class DataLoaderConfig:
    num_workers: int = _check(_non_negative, default=0)  # the DataLoader's worker processes, as you run it today
    prefetch_factor: Optional[int] = _check(_positive, default=None)  # batches each worker loads ahead; None: torch's 2
    pin_memory: bool = False  # page-locked batches (speeds copies to a GPU)
    persistent_workers: bool = False  # workers kept from one epoch to the next
    shuffle: bool = True  # samples in a random order each epoch


_host_port = (lambda v: bool(re.match(r"^[\w.\-]+:\d{1,5}$", v)) and 0 < int(v.rsplit(":", 1)[1]) < 65536,
              "host:port (the address every node reaches on node 0, e.g. 10.0.0.1:29511)")


@dataclass(frozen=True)
class DistributedConfig:
    """Data-parallel training across processes and machines: each node's ranks started by
    torchrun behind the node's `launch` prefix, the model wrapped in DistributedDataParallel."""

    nodes: int = _check(_positive, default=1)  # machines
    ranks_per_node: int = _check(_positive, default=1)  # processes on each machine (one per GPU, with CUDA)
    backend: Literal["gloo", "nccl"] = "gloo"  # torch.distributed's: gloo on CPUs, nccl between GPUs
    rendezvous: Optional[str] = _check(_host_port, default=None)  # None: 127.0.0.1 and a free port
    launch: Optional[str] = None  # a command prefix per node, "{node}" replaced by its index: ssh, srun, ip netns exec
    # the user's DistributedDataParallel(...) settings: the baseline's
    find_unused_parameters: bool = False  # your DistributedDataParallel(...) setting: the baseline's
    bucket_cap_mb: float = _check(_above_zero, default=25.0)  # your DistributedDataParallel(...) setting: the baseline's

    def __post_init__(self):
        if self.nodes > 1 and self.rendezvous is None:
            raise _Invalid("workload.distributed.rendezvous", f"missing; {self.nodes} nodes need an address on node 0 that "
                                                              "every node reaches (host:port)")
        if self.nodes > 1 and not self.launch:
            raise _Invalid("workload.distributed.launch", f"missing; {self.nodes} nodes need a command prefix that starts "
                                                          "a process on node {node} (ssh node{node}, srun -N1 ..., ip netns exec ...)")

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node


@dataclass(frozen=True)
class TrainWorkload:
    """A training job: the loop the user runs today."""

    model: Ref = _check(_callable_ref)  # -> the nn.Module you train
    dataset: Ref = _check(_callable_ref)  # a map-style Dataset, or a DataLoader whose sampler and collate_fn are kept
    kind: Literal["train"] = "train"  # a training job built from your functions
    KIND_MODULE: ClassVar[str] = "advisor.kinds.train"
    RECIPES: ClassVar[str] = "train"  # the recipes' `kinds` that apply (`distributed` with that section)
    CHILD_RUN: ClassVar[str] = "advisor.workload:run_train"
    SERVED: ClassVar[bool] = False
    model_args: dict = field(default_factory=dict)  # keyword arguments for model
    dataset_args: dict = field(default_factory=dict)  # keyword arguments for dataset
    loss: Optional[Ref] = _check(_callable_ref, default=None)  # loss(output, batch) -> scalar; None: cross-entropy on batch[1]
    collate: Optional[Ref] = _check(_callable_ref, default=None)  # collate_fn for every DataLoader advisor builds
    step: Optional[Ref] = _check(_callable_ref, default=None)  # train_step(model, batch, optimizer) -> loss
    # {name: a torch.optim class or a dotted path to any optimizer class, **options}, or build_optimizer(model)
    optimizer: Any = field(default_factory=lambda: {"name": "SGD", "lr": 0.01})
    batch_size: int = _check(_positive, default=32)  # samples a step
    dataloader: DataLoaderConfig = field(default_factory=DataLoaderConfig)  # your DataLoader's settings: the baseline's
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA where there is a GPU
    threads: Optional[int] = _check(_positive, default=None)  # torch.set_num_threads, if your job sets it
    distributed: Optional[DistributedConfig] = None  # data-parallel across processes and machines

    def __post_init__(self):
        _check_optimizer(self.optimizer)


@dataclass(frozen=True)
class LightningWorkload:
    """A LightningModule and its LightningDataModule: advisor runs training_step and
    configure_optimizers on batches from train_dataloader()."""

    module: Ref = _check(_callable_ref)  # a LightningModule class or builder
    datamodule: Ref = _check(_callable_ref)  # a LightningDataModule class or builder
    kind: Literal["lightning"] = "lightning"  # a LightningModule trained on its LightningDataModule
    KIND_MODULE: ClassVar[str] = "advisor.kinds.lightning"
    RECIPES: ClassVar[str] = "train"
    CHILD_RUN: ClassVar[str] = "advisor.workload:run_lightning"
    SERVED: ClassVar[bool] = False
    module_args: dict = field(default_factory=dict)  # keyword arguments for module
    datamodule_args: dict = field(default_factory=dict)  # keyword arguments for datamodule
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA where there is a GPU
    threads: Optional[int] = _check(_positive, default=None)  # torch.set_num_threads, if your job sets it


@dataclass(frozen=True)
class ScriptWorkload:
    """An unmodified training script, run as `python SCRIPT ARGS` would run it: advisor finds its
    steps (each backward of a scalar loss), times them, and applies plans from outside its code."""

    script: str = _check((lambda v: v.endswith(".py"), "the path of a Python file (train.py)"))  # run from the config's folder
    # enough training to pass the warm-up and the timed window
    args: Any = _check((lambda v: isinstance(v, list) and all(isinstance(a, (str, int, float)) for a in v),
                        "a list of the script's command-line arguments ([--epochs, '1'])"), default_factory=list)
    kind: Literal["script"] = "script"  # your training script, unmodified
    KIND_MODULE: ClassVar[str] = "advisor.kinds.script"
    RECIPES: ClassVar[str] = "script"
    CHILD_RUN: ClassVar[str] = "advisor.workload:run_script"
    SERVED: ClassVar[bool] = False
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA where there is a GPU
    threads: Optional[int] = _check(_positive, default=None)  # torch.set_num_threads, if your script sets it


@dataclass(frozen=True)
class InferWorkload:
    """A model served request by request: the latency a client sees, under a load pattern."""

    model: Ref = _check(_callable_ref)  # -> nn.Module (advisor puts it in eval mode)
    requests: Ref = _check(_callable_ref)  # -> a list of requests, each one call's input (tensor, tuple or dict)
    kind: Literal["infer"] = "infer"  # a model served request by request
    KIND_MODULE: ClassVar[str] = "advisor.kinds.infer"
    RECIPES: ClassVar[str] = "infer"
    CHILD_RUN: ClassVar[str] = "advisor.workload:run_infer"
    SERVED: ClassVar[bool] = True  # judged by the latency its clients see
    model_args: dict = field(default_factory=dict)  # keyword arguments for model
    requests_args: dict = field(default_factory=dict)  # keyword arguments for requests
    handler: Optional[Ref] = _check(_callable_ref, default=None)  # handle(model, request) -> output: your pre/post-processing
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA where there is a GPU
    threads: Optional[int] = _check(_positive, default=None)  # torch.set_num_threads, if your service sets it


SOURCE_FORMATS = ("csv", "parquet", "jsonl")


@dataclass(frozen=True)
class SourceConfig:
    path: str  # a file or a glob, relative to the config's folder
    format: Optional[Literal["csv", "parquet", "jsonl"]] = None  # None: from the files' suffix
    read_args: dict = field(default_factory=dict)  # what the user passes to the reader today


@dataclass(frozen=True)
class DaskConfig:
    scheduler: Optional[str] = None  # a running cluster's scheduler address; None: a LocalCluster


@dataclass(frozen=True)
class PipelineWorkload:
    """A pandas pipeline: read the source, transform it, combine partial results, write the sink."""

    source: SourceConfig  # what the pipeline reads
    transform: Ref = _check(_callable_ref)  # DataFrame -> DataFrame
    kind: Literal["pipeline"] = "pipeline"  # a pandas pipeline
    KIND_MODULE: ClassVar[str] = "advisor.kinds.pipeline"
    RECIPES: ClassVar[str] = "pipeline"
    CHILD_RUN: ClassVar[str] = "advisor.workload:run_pipeline"
    SERVED: ClassVar[bool] = False
    partition_safe: bool = False  # transform(concat(parts)) == combine([transform(p) for p in parts])
    combine: Optional[Ref] = _check(_callable_ref, default=None)  # list of partial frames -> frame
    sink: Optional[str] = None  # an output file (.parquet or .csv), relative to the config's folder
    order_matters: bool = True  # False: outputs are compared as sets of rows
    float_rtol: float = _check(_non_negative, default=1e-9)  # float tolerance for output equality
    dask: DaskConfig = field(default_factory=DaskConfig)  # where the dask recipe runs


def source_format_of(source: "SourceConfig") -> str:
    """The source's format, as declared or as its path's suffix says (csv when it cannot tell)."""
    if source.format:
        return source.format
    suffix = source.path.rsplit(".", 1)[-1].lower()
    return {"parquet": "parquet", "pq": "parquet", "jsonl": "jsonl", "json": "jsonl"}.get(suffix, "csv")


# The one registry of workload kinds: each maps to its own config section, which names the kind's
# parent side (`KIND_MODULE`: evidence, rules, comparison) and its child side (`CHILD_RUN`: the
# job loaded and run in a measurement child). None marks a kind this version cannot run yet.
WORKLOAD_KINDS: dict[str, Optional[type]] = {
    "train": TrainWorkload, "lightning": LightningWorkload, "infer": InferWorkload, "pipeline": PipelineWorkload,
    "script": ScriptWorkload,
}
DEFAULT_KIND = "train"  # a workload that names no kind is one
# Each kind's parent side by name (`AdvisorConfig.kind`): the sections' own, and the kinds a
# section's settings choose (a training job with `distributed` runs as ranks).
KIND_MODULES: dict[str, str] = {
    **{name: section.KIND_MODULE for name, section in WORKLOAD_KINDS.items() if section is not None},
    "distributed": "advisor.kinds.distributed",
}


@dataclass(frozen=True)
class LoadConfig:
    """How requests arrive (inference): `closed`, N clients back to back; `open`, Poisson
    arrivals at a rate, whose queueing is part of the latency a client sees."""

    mode: Literal["closed", "open"] = "closed"  # inference: closed, clients back to back; open, arrivals at a rate
    concurrency: int = _check(_positive, default=1)  # inference: clients of a closed load
    # inference: an open load's arrivals a second
    rate_per_s: Optional[float] = _check((lambda v: v > 0, "a number > 0 (requests per second)"), default=None)

    def __post_init__(self):
        if self.mode == "open" and self.rate_per_s is None:
            raise _Invalid("load.rate_per_s", "missing; an open load needs its arrival rate (requests per second)")


@dataclass(frozen=True)
class MeasureConfig:
    warmup_steps: int = _check(_non_negative, default=5)  # training: steps run before the timed window
    steps: int = _check(_positive, default=40)  # training: timed steps
    profile_steps: int = _check(_positive, default=5)  # steps (requests) under the profiler, in a run of its own
    timeout_s: float = _check(_positive, default=300.0)  # a run's time limit: past it, it is killed and counts as failed
    seed: int = 0  # seeds every run's random numbers
    warmup_requests: int = _check(_non_negative, default=20)  # inference: served before the timed requests
    requests: int = _check(_positive, default=400)  # inference: timed requests
    fresh_rounds: bool = True  # each run of a verification round in a new interpreter, as your own runs are; false: forked


MOST_PAIRS = 40  # the most rounds a verification may grow to (`search.max_pairs`)


@dataclass(frozen=True)
class SearchConfig:
    recipes: Any = "auto"  # "auto", a recipe's name, or a list of names (`advisor.session.planning.select_recipes`)
    trials: int = _check(_positive, default=24)  # distinct plans measured, the baseline's included
    time_budget_s: float = _check(_positive, default=600.0)  # the search's and the verification's time
    min_speedup: float = _check(_positive, default=1.05)  # the bar: a fix is verified when its interval's low end clears it
    storage: Optional[str] = None  # an Optuna storage URL; None: a journal file next to the config
    verify_top: int = _check(_non_negative, default=3)  # candidates re-measured against the baseline; 0: trials only
    pairs: int = _check((lambda v: v >= 5, "a number >= 5"), default=5)  # interleaved rounds (3 when every verdict is clear)
    # rounds while a verdict straddles the bar
    max_pairs: int = _check((lambda v: 5 <= v <= MOST_PAIRS, f"a number from 5 to {MOST_PAIRS}"), default=12)
    # the #1's interval, as a share of its speedup either side, that a verdict's rounds go on to
    # (up to max_pairs, within time_budget_s); 0: stop at the verdict
    precision: float = _check((lambda v: 0 <= v < 1, "a share from 0 to 1 (0.1: +-10%)"), default=0.1)
    prune: bool = True  # stop a trial midway once it cannot end above 70% of the best trial's rate (training, services)
    # with a fix verified, stop after this many trials without a plan 1.2x faster (EARLY_MARGIN);
    # None: trials // 4, at least 3; 0: never
    patience: Optional[int] = _check(_non_negative, default=None)
    # None: p95 for inference, throughput otherwise; capacity (inference): the highest arrival rate within constraints.p95_ms
    objective: Optional[Literal["throughput", "p95", "capacity"]] = None

    def __post_init__(self):
        _check_recipe_names(self.recipes)
        object.__setattr__(self, "storage", _from_environment(self.storage, "search.storage"))
        if self.max_pairs < self.pairs:
            raise _Invalid("search.max_pairs", f"{self.max_pairs} is under search.pairs ({self.pairs}); set it to "
                                               f"{self.pairs} or more (the rounds a verification may grow to)")


@dataclass(frozen=True)
class ConstraintsConfig:
    max_memory_mb: Optional[float] = _check(_positive, default=None)  # the memory budget every plan must keep
    loss_rtol: float = _check(_non_negative, default=0.05)  # training: the losses' relative tolerance (tolerance recipes)
    p95_ms: Optional[float] = _check(_above_zero, default=None)  # inference: the latency SLO every plan must keep
    output_rtol: float = _check(_non_negative, default=1e-2)  # inference: outputs equal within this
    # inference: the share of a classifier's top-1 answers a plan must keep
    min_top1_agreement: float = _check((lambda v: 0 <= v <= 1, "a share between 0 and 1"), default=0.99)


@dataclass(frozen=True)
class TrackingConfig:
    uri: Optional[str] = None  # MLflow's tracking URI; None: sqlite:///mlflow.db next to the config
    experiment: Optional[str] = None  # the MLflow experiment; None: the config's name

    def __post_init__(self):
        object.__setattr__(self, "uri", _from_environment(self.uri, "tracking.uri"))


NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_plain_name = (lambda v: bool(NAME_PATTERN.match(v)) and ".." not in v,
               "a plain name of letters, digits, '.', '_' and '-' (it names the study and the results folder)")


@dataclass(frozen=True)
class AdvisorConfig:
    name: str = _check(_plain_name)  # names the study, the MLflow experiment and the results folder
    workload: TrainWorkload | LightningWorkload | InferWorkload | PipelineWorkload | ScriptWorkload = field(
        metadata={"internal": True})  # validated by its kind
    load: LoadConfig = field(default_factory=LoadConfig)  # inference: how requests arrive
    measure: MeasureConfig = field(default_factory=MeasureConfig)  # how each run is measured
    search: SearchConfig = field(default_factory=SearchConfig)  # what is tried, and for how long
    constraints: ConstraintsConfig = field(default_factory=ConstraintsConfig)  # what every plan must keep
    tracking: TrackingConfig = field(default_factory=TrackingConfig)  # where MLflow logs
    path: Path = field(default=Path("config.yaml"), metadata={"internal": True})

    def __post_init__(self):
        _check_recipe_kinds(self.search.recipes, "distributed" if self.kind == "distributed" else self.workload.RECIPES)
        if self.objective == "throughput" and self.workload.SERVED and self.constraints.p95_ms is None:
            raise _Invalid("search.objective", "throughput needs constraints.p95_ms, the latency it must keep; "
                                               "set it, or use objective: p95")
        if self.objective == "capacity" and not self.workload.SERVED:
            raise _Invalid("search.objective", "capacity is a service's (kind: infer): the highest arrival rate within "
                                               "its p95 SLO; use throughput for this job")
        if self.objective == "capacity" and self.constraints.p95_ms is None:
            raise _Invalid("search.objective", "capacity needs constraints.p95_ms, the latency SLO its arrival rates "
                                               "must keep; set it (e.g. constraints: {p95_ms: 50}), or use objective: p95")
        if self.workload.SERVED and self.load.mode == "open" and self.objective != "capacity":
            arriving_s = self.measure.requests / self.load.rate_per_s  # the replay lasts at least this long
            if arriving_s >= self.measure.timeout_s:
                raise _Invalid("load.rate_per_s", (
                    f"{self.measure.requests} timed requests (measure.requests) arriving at {self.load.rate_per_s:g}/s "
                    f"take about {arriving_s:.0f} s, past measure.timeout_s ({self.measure.timeout_s:g} s); raise the "
                    f"rate, lower measure.requests, or set measure.timeout_s above {arriving_s + 60:.0f} s"))

    @property
    def kind(self) -> str:
        """The kind that measures this job: its section's, or `distributed` for a training job
        whose ranks run across processes (`KIND_MODULES`)."""
        if getattr(self.workload, "distributed", None) is not None:
            return "distributed"
        return self.workload.kind

    @property
    def objective(self) -> str:
        """What the search maximises: latency's p95 (lower is better) or throughput."""
        return self.search.objective or ("p95" if self.workload.SERVED else "throughput")

    @property
    def root(self) -> Path:
        """The folder that `module:callable` references resolve against."""
        return self.path.parent


def load_config(path: str | Path) -> AdvisorConfig:
    """Reads and validates a config file.

    Raises:
        ConfigError: with a one-line message naming the file, the key path and the fix.
    """
    path = Path(path)
    if path.is_dir():
        inside = ", ".join(sorted(p.name for p in path.glob("*.y*ml"))[:5]) or "no YAML file"
        raise ConfigError(f"{path}: is a folder, not a config; pass the path of a YAML config (in it: {inside})")
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found; pass the path of a YAML config")
    try:
        raw = bounded_yaml(path.read_text(), path)
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"{path}: cannot be read ({why}); make it a readable UTF-8 text file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: {where}invalid YAML ({problem}); fix the syntax there") from None
    return parse_config(raw, path.resolve())


MOST_YAML_NODES = 100_000  # a config's values once its aliases are expanded: far past any real config
DEEPEST_YAML = 64  # mappings and lists inside one another


def bounded_yaml(text: str, path: Path) -> Any:
    """The YAML document, refused in one line where its aliases refer to themselves, expand past
    MOST_YAML_NODES (a few hundred bytes of nested aliases can stand for billions of values,
    which every later walk of the config would expand) or nest past DEEPEST_YAML."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:  # the reader itself recurses once a level
        raise ConfigError(f"{path}: nested over {DEEPEST_YAML} levels deep; flatten it") from None
    if node is None:
        return None
    seen = 0
    stack: list[tuple[Any, int, tuple]] = [(node, 1, ())]
    while stack:
        current, depth, path_ids = stack.pop()
        seen += 1
        if seen > MOST_YAML_NODES:
            raise ConfigError(f"{path}: its aliases expand to over {MOST_YAML_NODES:,} values; write the values out, "
                              "or use fewer nested aliases")
        if depth > DEEPEST_YAML:
            raise ConfigError(f"{path}: line {current.start_mark.line + 1}: nested over {DEEPEST_YAML} levels deep; "
                              "flatten it")
        if id(current) in path_ids:
            raise ConfigError(f"{path}: line {current.start_mark.line + 1}: an alias refers to a value that holds "
                              "it; write the value out")
        if isinstance(current, yaml.MappingNode):
            children = [item for pair in current.value for item in pair]
        elif isinstance(current, yaml.SequenceNode):
            children = current.value
        else:
            continue
        stack.extend((child, depth + 1, (*path_ids, id(current))) for child in children)
    return yaml.safe_load(text)


PYTHON_COMMAND = re.compile(r"^python[0-9.]*$")


def script_config(command: list[str], folder: Path) -> AdvisorConfig:
    """`python SCRIPT ARGS` (or `SCRIPT ARGS`), run from `folder`, as a `kind: script` config
    rooted there: the study, the store and the results go where a config file there would put them."""
    words = command[1:] if command and PYTHON_COMMAND.match(Path(command[0]).name) else list(command)
    if not words or words[0].startswith("-") or not words[0].endswith(".py"):
        raise ConfigError(f"after --: expected a script's command line, python SCRIPT.py [ARGS], got "
                          f"{' '.join(command) or 'nothing'!r} (python's own options and -m are not supported)")
    if not (folder / words[0]).is_file():
        raise ConfigError(f"after --: {words[0]} not found in {folder}; run advisor from the folder you run the script from")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", Path(words[0]).stem)
    return parse_config({"name": name, "workload": {"kind": "script", "script": words[0], "args": words[1:]}},
                        folder.resolve() / f"{name}.advisor.yaml")


def parse_config(raw: Any, path: Path) -> AdvisorConfig:
    """Validates an already-parsed mapping as the config at `path`."""
    try:
        if not isinstance(raw, dict):
            raise _Invalid("", f"expected a mapping of sections, got {_type_name(raw)}")
        workload = raw.get("workload")
        kind = workload.get("kind", DEFAULT_KIND) if isinstance(workload, dict) else DEFAULT_KIND
        if kind not in WORKLOAD_KINDS:
            raise _Invalid("workload.kind", f"expected one of {_choices(WORKLOAD_KINDS)}, got {kind!r}")
        if WORKLOAD_KINDS[kind] is None:
            supported = ", ".join(repr(name) for name, cls in WORKLOAD_KINDS.items() if cls is not None)
            raise _Invalid("workload.kind", f"{kind!r} is not supported by this version yet; use one of {supported}")
        if "workload" not in raw:
            raise _Invalid("workload", "missing; add it (a mapping that names the job's code)")
        workload = _build(WORKLOAD_KINDS[kind], raw["workload"], "workload")
        if kind == "pipeline":
            _check_sink(workload, path.parent)
        if kind == "script" and not (path.parent / workload.script).is_file():
            raise _Invalid("workload.script", f"{workload.script} not found (relative to the config's folder "
                                              f"{path.parent}); name the training script to run")
        rest = {key: value for key, value in raw.items() if key != "workload"}
        return _build(AdvisorConfig, rest, "", extra={"path": path, "workload": workload})
    except _Invalid as exc:
        where = f"{exc.key_path}: " if exc.key_path else ""
        raise ConfigError(f"{path}: {where}{exc.problem}") from None


def _from_environment(url: Optional[str], key_path: str) -> Optional[str]:
    """A URL with each `${NAME}` read from the environment (a password kept out of the file)."""
    if not isinstance(url, str):
        return url
    unset = unset_variables(url)
    if unset:
        raise _Invalid(key_path, f"names the environment variable {unset[0]}, which is not set; export it, "
                                 "or write the value in the config")
    return expanded(url)


def _check_recipe_names(setting: Any) -> None:
    """`search.recipes` names recipes that exist, before anything is measured (whether each
    applies to this workload is judged once its diagnosis is known)."""
    import difflib

    from advisor.recipes import RECIPES

    if setting == "auto":
        return
    names = [setting] if isinstance(setting, str) else setting
    if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
        raise _Invalid("search.recipes", f"expected auto, a recipe's name or a list of names, got {setting!r}")
    known = [recipe.name for recipe in RECIPES]
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(known)}"
            raise _Invalid("search.recipes", f"unknown recipe {name!r}; {hint}")


def _check_recipe_kinds(setting: Any, family: str) -> None:
    """Each recipe `search.recipes` names applies to this kind of workload: told before anything
    runs or is logged (whether it applies to this job is judged once its diagnosis is known)."""
    from advisor.recipes import by_name

    for name in [] if setting == "auto" else [setting] if isinstance(setting, str) else setting:
        kinds = by_name(name).kinds
        if family not in kinds:
            listed = ", ".join(kinds[:-1]) + " and " * (len(kinds) > 1) + kinds[-1]
            raise _Invalid("search.recipes", f"{name} applies to {listed} workloads, not {family}; remove it")


def _check_sink(workload: "PipelineWorkload", root: Path) -> None:
    """The sink is written by the user's job, never by advisor; still, one in a folder that does
    not exist, or one that is the source itself, is a job that cannot run as configured."""
    if not workload.sink:
        return
    sink = (root / workload.sink).resolve()
    if not sink.parent.is_dir():
        raise _Invalid("workload.sink", f"its folder {sink.parent} does not exist; create it, or name a sink in "
                                        "an existing folder")
    source = Path(workload.source.path)
    sources = {p.resolve() for p in (source if source.is_absolute() else root / source).parent.glob(source.name)}
    if sink in sources or sink == (root / source).resolve():
        raise _Invalid("workload.sink", f"{workload.sink} is the source itself; the job would overwrite its input: "
                                        "name another file")


class _Invalid(Exception):
    def __init__(self, key_path: str, problem: str):
        super().__init__(f"{key_path}: {problem}")
        self.key_path = key_path
        self.problem = problem


def _check_optimizer(optimizer: Any) -> None:
    if isinstance(optimizer, dict):
        if not isinstance(optimizer.get("name"), str):
            raise _Invalid("workload.optimizer.name", "missing; name a torch.optim class (e.g. name: SGD) or give a "
                                                      "dotted path to one (e.g. name: torch.optim.AdamW)")
        return
    if not _callable_ref[0](optimizer):
        raise _Invalid("workload.optimizer", f"expected a mapping with a name, or a builder "
                                             f"('file.py:build_optimizer'), got {optimizer!r}")


def _build(cls: type, raw: Any, key_path: str, extra: Optional[dict] = None):
    if not isinstance(raw, dict):
        raise _Invalid(key_path, f"expected a mapping, got {_type_name(raw)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    for key in raw:
        if key not in fields:
            raise _Invalid(_join(key_path, str(key)), f"unknown key{_suggest(str(key), fields)}")
    hints = typing.get_type_hints(cls)
    values = dict(extra or {})
    for name, f in fields.items():
        sub_path = _join(key_path, name)
        if name in raw:
            values[name] = _coerce(hints[name], raw[name], sub_path)
            predicate, description = f.metadata.get("check", (None, ""))
            if predicate and values[name] is not None and not predicate(values[name]):
                raise _Invalid(sub_path, f"expected {description}, got {raw[name]!r}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            expected = f.metadata.get("check", (None, _describe(hints[name])))[1]
            raise _Invalid(sub_path, f"missing; add it ({expected})")
    return cls(**values)


def _coerce(hint: Any, value: Any, key_path: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(inner, value, key_path)
    if origin is Literal:
        if value not in args:
            raise _Invalid(key_path, f"expected one of {_choices(args)}, got {value!r}")
        return value
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, key_path)
    if hint is Any:
        return value
    ok = {
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        bool: isinstance(value, bool),
        str: isinstance(value, str),
        dict: isinstance(value, dict),
    }[hint]
    if not ok:
        raise _Invalid(key_path, f"expected {_describe(hint)}, got {value!r} ({_type_name(value)}){_yaml_number_hint(hint, value)}")
    return float(value) if hint is float else value


def _yaml_number_hint(hint: Any, value: Any) -> str:
    """YAML reads 1.0e9 as text (its numbers need the exponent's sign, 1.0e+9): say how to write it."""
    if hint not in (int, float) or not isinstance(value, str):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    plain = str(int(number)) if number.is_integer() and abs(number) < 1e18 else repr(number)
    return f"; YAML reads {value} as text: write {plain}, or an exponent with a dot and its sign (1.0e+9)"


def _describe(hint: Any) -> str:
    if dataclasses.is_dataclass(hint):
        return "a mapping"
    words = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a mapping"}
    return words.get(hint, "a value")


def _suggest(key: str, valid) -> str:
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    if close:
        return f"; did you mean '{close[0]}'?"
    return f"; valid keys: {', '.join(valid)}"


def _choices(values) -> str:
    return ", ".join(repr(v) for v in values)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", type(None): "nothing"}.get(type(value), type(value).__name__)


def config_section(config: AdvisorConfig, name: str) -> dict:
    """A section of the config as a plain dict (for fingerprints and logging)."""
    return dataclasses.asdict(getattr(config, name))
