"""What every recipe declares: when it applies, its search space, its risk, its snippet.

A recipe is a thin declaration (`Recipe`) beside the pure functions that apply it, in its own
module. Search-space keys are plan keys, so a trial's parameters are a plan's changes as they
are, and the same names show up in Optuna and in MLflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

RISKS = ("exact", "tolerance", "changes semantics")


@dataclass(frozen=True)
class Context:
    """What the parent knows about the job when it picks recipes (from the baseline's runs)."""

    device: str  # "cpu" or "cuda"
    cores: int
    default_threads: int  # torch's intra-op threads when the user sets none
    blocks: int  # blocks checkpointing can wrap (0: none found)
    cpu_bf16: bool  # the CPU has native bfloat16 arithmetic
    bottlenecks: tuple[str, ...] = ()  # diagnosed, most severe first
    # every diagnosed bottleneck's share of the step, whatever its band: (bottleneck, share), largest first
    reach: tuple[tuple[str, float], ...] = ()
    named: tuple[str, ...] = ()  # recipes the evidence names outright (page faults: the allocator)
    batch_stat_layers: int = 0  # BatchNorm layers: their statistics depend on the batch size
    kind: str = "train"  # the recipes' family of the workload kind: train, distributed, infer or pipeline
    step: str = ""  # the name of the user's own step function; empty when advisor runs the step
    optimizer: str = ""  # the optimizer class advisor builds from workload.optimizer; empty: the user's own
    conv_layers: int = 0  # Conv layers (channels_last, cuDNN autotuning)
    # CUDA only, from the baseline's runs:
    gpu_capability: float = 0.0  # the GPU's compute capability (8.0: Ampere); 0: unknown
    tf32_already: bool = False  # the job itself lets float32 matmuls use TF32
    # Data-parallel training only, from the config:
    find_unused_parameters: bool = False  # the user's DistributedDataParallel settings
    bucket_cap_mb: float = 25.0
    # Pipelines only, from the baseline's profile run:
    source_format: str = ""  # csv, parquet or jsonl
    partition_safe: bool = False
    rows: int = 0
    columns: tuple[str, ...] = ()  # every column of the source
    used_columns: tuple[str, ...] = ()  # the columns the transform reads (detected)
    category_columns: tuple[str, ...] = ()  # low-cardinality text columns
    missing_text_columns: tuple[str, ...] = ()  # text columns with missing values
    dask_scheduler: Optional[str] = None  # a running cluster's address, from the config
    rewrites: tuple[tuple[str, str], ...] = ()  # (file.py:line, its column form): row functions rewritten, equal on a sample
    rewrite_problems: tuple[str, ...] = ()  # why the others were not: the construct, or the first row that differs
    # Inference only, from the baseline's runs and the config's load:
    grad_enabled: bool = False  # the service's outputs carry autograd history
    open_load: bool = False  # requests arrive on their own (Poisson), not when the last one returned
    concurrency: int = 1  # a closed load's clients
    batchable: bool = False  # requests can be joined along their first dimension
    linear_layers: int = 0  # Linear and LSTM layers (dynamic quantization)
    # Scripts only, from the baseline's full run: [file.py:line, that line's code] of a call
    loader_call: tuple[str, ...] = ()  # the first DataLoader(...) the script builds; empty: none
    forward_call: tuple[str, ...] = ()  # the first call of a model (its outermost module)


@dataclass(frozen=True)
class IntRange:
    low: int
    high: int
    log: bool = False


@dataclass(frozen=True)
class Choice:
    options: tuple


Param = Union[IntRange, Choice]


@dataclass(frozen=True)
class Recipe:
    """One fix: its metadata and its behaviour, as plain functions of a `Context` or a plan."""

    name: str
    summary: str
    targets: tuple[str, ...]  # the bottlenecks it fixes
    risk: str  # one of RISKS
    keys: tuple[str, ...]  # the plan keys it owns
    why_not: Callable[[Context], Optional[str]]  # None when it applies, else the reason it doesn't
    space: Callable[[Context], dict[str, Param]]
    snippet: Callable[[dict], str]
    textbook: Callable[[Context], dict]  # the setting a blog post would pick: tried first
    kinds: tuple[str, ...] = ("train",)  # the workload kinds it applies to
    unmasks: tuple[str, ...] = ()  # the bottlenecks left on top once it works: their recipes are tried with it
    # its snippet where the context says more (the user's own step, rewritten functions); None: `snippet`
    snippet_in: Optional[Callable[[dict, Context], Optional[str]]] = None
    # the plan keys that do nothing under a plan, by this recipe's settings (prefetch without workers)
    idle: Callable[[dict], frozenset] = lambda plan: frozenset()
    prunable: bool = True  # its trials may be stopped midway: its running rate midway says how it ends
    # its one-off cost over its verification runs and the reference's, `per` timed unit (a step, a
    # request, a run): {"what", "seconds", "paid_back_after" (units, None: never), "per"}, or {}
    one_off_cost: Optional[Callable[[list, list, str], dict]] = None
    # how it applies to a run: hook name -> function (`recipes.applied`, `recipes.entered`)
    hooks: dict = field(default_factory=dict)
    # what it cannot do here, though chosen, in the report's words: {what: why}
    limits: Callable[[Context], dict] = lambda context: {}
    off: dict = field(default_factory=dict)  # its keys' settings that apply nothing, where not None

    def settings_off(self) -> dict:
        """Each of its keys at the setting that applies nothing: the baseline's, unless the user set it."""
        return {key: self.off.get(key) for key in self.keys}

    def active(self, plan: dict, baseline: dict) -> bool:
        """Whether `plan` changes any of this recipe's keys from the baseline."""
        return any(plan.get(key) != baseline.get(key) for key in self.keys)


def keyword_option(plan_key: str, keyword: str, off: Any = None) -> Callable[..., dict]:
    """A fold over a call's keyword options that sets `keyword` to the plan's `plan_key`, unless
    the plan leaves it unset or at `off` (DistributedDataParallel's settings, one recipe each)."""

    def fold(options: dict, plan: dict, **facts: Any) -> dict:
        value = plan.get(plan_key)
        return options if value is None or value == off else {**options, keyword: value}

    return fold


def serves(plan: dict) -> bool:
    """Whether a plan is a served model's (its snippets speak of requests, not training steps)."""
    return "inference_mode.enabled" in plan


def always(context: Context) -> Optional[str]:
    return None


def at_call(call: tuple[str, ...], change: str) -> str:
    """A change anchored at the script's own line: where it is, what it says, what to do there."""
    place, code = call
    return f"# {place}: {code}\n{change}"


def format_value(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def reader(plan: dict, *options: str) -> str:
    """The pandas read call for the plan's source format, with `options` added."""
    call = {"parquet": "pd.read_parquet(path", "jsonl": "pd.read_json(path, lines=True"}.get(
        plan.get("pipeline.format"), "pd.read_csv(path")
    return call + "".join(f", {option}" for option in options) + ")"
