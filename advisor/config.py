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
from typing import Any, ClassVar, Literal, Mapping, Optional

import yaml

from advisor.errors import ConfigError
from advisor.secrets import expanded, unset_variables

CALLABLE_PATTERN = re.compile(r"^(?P<module>[\w.\-/]+?)(?P<file>\.py)?:(?P<attr>[A-Za-z_]\w*)$")


positive = (lambda v: v >= 1, "a number >= 1")
above_zero = (lambda v: v > 0, "a number > 0")  # a latency: services here answer in 0.05-4 ms
non_negative = (lambda v: v >= 0, "a number >= 0")
# A reference to the user's code: 'module:callable' or 'file.py:callable' in a file; through the
# Python API, also the callable itself.
Ref = Any
callable_ref = (lambda v: callable(v) or (isinstance(v, str) and bool(CALLABLE_PATTERN.match(v))),
                 "'module:callable' or 'path/to/file.py:callable'")


def checked(check, **kwargs):
    """A dataclass field with an extra (predicate, description) check run after its type matched."""
    return field(metadata={"check": check}, **kwargs)


class WorkloadSection:
    """What every kind's `workload:` section (a frozen dataclass in its kind's package,
    `advisor.kinds.<kind>.section`) says of itself, beyond its own keys."""

    kind: str  # the section's `kind:` value
    RECIPES: ClassVar[str] = ""  # the recipes' `kinds` that apply (a section may choose another, `runs_as`)
    SERVED: ClassVar[bool] = False  # judged by the latency its clients see
    SANDBOXED: ClassVar[bool] = False  # its runs go into a copy of the machine (`advisor.harness.sandbox`)

    def runs_as(self) -> str:
        """The kind that measures this job: the section's own, unless its settings choose another."""
        return self.kind

    def recipe_family(self) -> str:
        return self.RECIPES

    def check(self, root: Path) -> None:
        """What validating needs the config's folder for (files it names exist); raises `Invalid`."""

    def run_child(self, config: "AdvisorConfig", spec: dict) -> dict:
        """Inside a measurement child: the job loaded and run under the spec's plan."""
        raise NotImplementedError


@dataclass(frozen=True)
class LoadConfig:
    """How requests arrive (inference): `closed`, N clients back to back; `open`, Poisson
    arrivals at a rate, whose queueing is part of the latency a client sees."""

    mode: Literal["closed", "open"] = "closed"  # inference: closed, clients back to back; open, arrivals at a rate
    concurrency: int = checked(positive, default=1)  # inference: clients of a closed load
    # inference: an open load's arrivals a second
    rate_per_s: Optional[float] = checked((lambda v: v > 0, "a number > 0 (requests per second)"), default=None)

    def __post_init__(self):
        if self.mode == "open" and self.rate_per_s is None:
            raise Invalid("load.rate_per_s", "missing; an open load needs its arrival rate (requests per second)")


@dataclass(frozen=True)
class MeasureConfig:
    warmup_steps: int = checked(non_negative, default=5)  # training: steps run before the timed window
    steps: int = checked(positive, default=40)  # training: timed steps
    profile_steps: int = checked(positive, default=5)  # steps (requests) under the profiler, in a run of its own
    timeout_s: float = checked(positive, default=300.0)  # a run's time limit: past it, it is killed and counts as failed
    seed: int = 0  # seeds every run's random numbers
    warmup_requests: int = checked(non_negative, default=20)  # inference: served before the timed requests
    requests: int = checked(positive, default=400)  # inference: timed requests
    # each verification round's runs forked from a new interpreter of the round's own (a script's, or one held to a
    # budget: a new interpreter each); false: forked from the session's template
    fresh_rounds: bool = True
    # with fresh_rounds: rounds past the 3rd run the job again in the first rounds' interpreters (2.3x cheaper; runs
    # later into a process's life: experiments/kept_rounds.py); false: a new interpreter every run
    keep_interpreters: bool = False
    # training with workers that start again each epoch: the timed window runs on to span whole epochs, timing
    # the ends it crosses, where that costs at most this many seconds more; 0 (or past it): their ends are charged
    whole_epochs_s: float = checked(non_negative, default=3.0)


MOST_PAIRS = 40  # the most rounds a verification may grow to (`search.max_pairs`)


@dataclass(frozen=True)
class SearchConfig:
    recipes: Any = "auto"  # "auto", a recipe's name, or a list of names (`advisor.session.planning.select_recipes`)
    trials: int = checked(positive, default=24)  # distinct plans measured, the baseline's included
    time_budget_s: float = checked(positive, default=600.0)  # the search's and the verification's time
    min_speedup: float = checked(positive, default=1.05)  # the bar: a fix is verified when its interval's low end clears it
    storage: Optional[str] = None  # an Optuna storage URL; None: a journal file next to the config
    verify_top: int = checked(non_negative, default=3)  # candidates re-measured against the baseline; 0: trials only
    pairs: int = checked((lambda v: v >= 5, "a number >= 5"), default=5)  # interleaved rounds (3 when every verdict is clear)
    # rounds while a verdict straddles the bar
    max_pairs: int = checked((lambda v: 5 <= v <= MOST_PAIRS, f"a number from 5 to {MOST_PAIRS}"), default=12)
    # the #1's interval, as a share of its speedup either side, that a verdict's rounds go on to
    # (up to max_pairs, within time_budget_s); 0: stop at the verdict. The pinning rounds grow with the
    # square of 1/precision: quickstart sessions on 2 cores took a median 88 s at 0.1, 59 s at
    # 0.15, 42 s at 0 (docs/benchmarks.md)
    precision: float = checked((lambda v: 0 <= v < 1, "a share from 0 to 1 (0.1: +-10%)"), default=0.1)
    prune: bool = True  # stop a trial midway once it cannot end above 70% of the best trial's rate (training, services)
    # with a fix verified, stop after this many trials without a plan 1.2x faster (EARLY_MARGIN);
    # None: trials // 4, at least 3; 0: never
    patience: Optional[int] = checked(non_negative, default=None)
    # None: p95 for inference, throughput otherwise; capacity (inference): the highest arrival rate within constraints.p95_ms
    objective: Optional[Literal["throughput", "p95", "capacity"]] = None

    def __post_init__(self):
        _check_recipe_names(self.recipes)
        object.__setattr__(self, "storage", _from_environment(self.storage, "search.storage"))
        if self.max_pairs < self.pairs:
            raise Invalid("search.max_pairs", f"{self.max_pairs} is under search.pairs ({self.pairs}); set it to "
                                              f"{self.pairs} or more (the rounds a verification may grow to)")


@dataclass(frozen=True)
class ConstraintsConfig:
    max_memory_mb: Optional[float] = checked(positive, default=None)  # the memory budget every plan must keep
    loss_rtol: float = checked(non_negative, default=0.05)  # training: the losses' relative tolerance (tolerance recipes)
    p95_ms: Optional[float] = checked(above_zero, default=None)  # inference: the latency SLO every plan must keep
    output_rtol: float = checked(non_negative, default=1e-2)  # inference: outputs equal within this
    # inference: the share of a classifier's top-1 answers a plan must keep
    min_top1_agreement: float = checked((lambda v: 0 <= v <= 1, "a share between 0 and 1"), default=0.99)


@dataclass(frozen=True)
class TrackingConfig:
    # MLflow's tracking URI (a relative sqlite path: from the working folder, as sqlite opens it);
    # None: sqlite:///mlflow.db next to the config
    uri: Optional[str] = None
    experiment: Optional[str] = None  # the MLflow experiment; None: the config's name

    def __post_init__(self):
        object.__setattr__(self, "uri", _from_environment(self.uri, "tracking.uri"))


NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_plain_name = (lambda v: bool(NAME_PATTERN.match(v)) and ".." not in v,
               "a plain name of letters, digits, '.', '_' and '-' (it names the study and the results folder)")


@dataclass(frozen=True)
class AdvisorConfig:
    name: str = checked(_plain_name)  # names the study, the MLflow experiment and the results folder
    workload: WorkloadSection = field(metadata={"internal": True})  # validated by its kind's section
    load: LoadConfig = field(default_factory=LoadConfig)  # inference: how requests arrive
    measure: MeasureConfig = field(default_factory=MeasureConfig)  # how each run is measured
    search: SearchConfig = field(default_factory=SearchConfig)  # what is tried, and for how long
    constraints: ConstraintsConfig = field(default_factory=ConstraintsConfig)  # what every plan must keep
    tracking: TrackingConfig = field(default_factory=TrackingConfig)  # where MLflow logs
    path: Path = field(default=Path("config.yaml"), metadata={"internal": True})

    def __post_init__(self):
        _check_recipe_kinds(self.search.recipes, self.workload.recipe_family())
        if self.objective == "throughput" and self.workload.SERVED and self.constraints.p95_ms is None:
            raise Invalid("search.objective", "throughput needs constraints.p95_ms, the latency it must keep; "
                                              "set it, or use objective: p95")
        if self.objective == "capacity" and not self.workload.SERVED:
            raise Invalid("search.objective", "capacity is a service's (kind: infer): the highest arrival rate within "
                                              "its p95 SLO; use throughput for this job")
        if self.objective == "capacity" and self.constraints.p95_ms is None:
            raise Invalid("search.objective", "capacity needs constraints.p95_ms, the latency SLO its arrival rates "
                                              "must keep; set it (e.g. constraints: {p95_ms: 50}), or use objective: p95")
        if self.workload.SERVED and self.load.mode == "open" and self.objective != "capacity":
            arriving_s = self.measure.requests / self.load.rate_per_s  # the replay lasts at least this long
            if arriving_s >= self.measure.timeout_s:
                raise Invalid("load.rate_per_s", (
                    f"{self.measure.requests} timed requests (measure.requests) arriving at {self.load.rate_per_s:g}/s "
                    f"take about {arriving_s:.0f} s, past measure.timeout_s ({self.measure.timeout_s:g} s); raise the "
                    f"rate, lower measure.requests, or set measure.timeout_s above {arriving_s + 60:.0f} s"))

    @property
    def kind(self) -> str:
        """The kind that measures this job (`advisor.kinds.KINDS`): its section's, or the one its
        settings choose (`distributed` for a training job whose ranks run across processes)."""
        return self.workload.runs_as()

    @property
    def objective(self) -> str:
        """What the search maximises: latency's p95 (lower is better) or throughput."""
        return self.search.objective or ("p95" if self.workload.SERVED else "throughput")

    @property
    def root(self) -> Path:
        """The folder that `module:callable` references resolve against."""
        return self.path.parent


def load_config(path: str | Path, sections: Mapping[str, type], default_kind: str) -> AdvisorConfig:
    """Reads and validates a config file (through `advisor.kinds.load_config`, which knows every kind's section).

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
    return parse_config(raw, path.resolve(), sections, default_kind)


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


def parse_config(raw: Any, path: Path, sections: Mapping[str, type], default_kind: str) -> AdvisorConfig:
    """Validates an already-parsed mapping as the config at `path`, its workload by the section
    of its `kind` (`sections`, the kinds' own; `default_kind`, a workload's that names none).
    Call it through `advisor.kinds.parse_config`, which knows every kind."""
    try:
        if not isinstance(raw, dict):
            raise Invalid("", f"expected a mapping of sections, got {_type_name(raw)}")
        workload = raw.get("workload")
        kind = workload.get("kind", default_kind) if isinstance(workload, dict) else default_kind
        if kind not in sections:
            raise Invalid("workload.kind", f"expected one of {_choices(sections)}, got {kind!r}")
        if "workload" not in raw:
            raise Invalid("workload", "missing; add it (a mapping that names the job's code)")
        workload = _build(sections[kind], raw["workload"], "workload")
        workload.check(path.parent)
        rest = {key: value for key, value in raw.items() if key != "workload"}
        return _build(AdvisorConfig, rest, "", extra={"path": path, "workload": workload})
    except Invalid as exc:
        where = f"{exc.key_path}: " if exc.key_path else ""
        raise ConfigError(f"{path}: {where}{exc.problem}") from None


def _from_environment(url: Optional[str], key_path: str) -> Optional[str]:
    """A URL with each `${NAME}` read from the environment (a password kept out of the file)."""
    if not isinstance(url, str):
        return url
    unset = unset_variables(url)
    if unset:
        raise Invalid(key_path, f"names the environment variable {unset[0]}, which is not set; export it, "
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
        raise Invalid("search.recipes", f"expected auto, a recipe's name or a list of names, got {setting!r}")
    known = [recipe.name for recipe in RECIPES]
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(known)}"
            raise Invalid("search.recipes", f"unknown recipe {name!r}; {hint}")


def _check_recipe_kinds(setting: Any, family: str) -> None:
    """Each recipe `search.recipes` names applies to this kind of workload: told before anything
    runs or is logged (whether it applies to this job is judged once its diagnosis is known)."""
    from advisor.recipes import by_name

    for name in [] if setting == "auto" else [setting] if isinstance(setting, str) else setting:
        kinds = by_name(name).kinds
        if family not in kinds:
            listed = ", ".join(kinds[:-1]) + " and " * (len(kinds) > 1) + kinds[-1]
            raise Invalid("search.recipes", f"{name} applies to {listed} workloads, not {family}; remove it")


class Invalid(Exception):
    def __init__(self, key_path: str, problem: str):
        super().__init__(f"{key_path}: {problem}")
        self.key_path = key_path
        self.problem = problem


def _build(cls: type, raw: Any, key_path: str, extra: Optional[dict] = None):
    if not isinstance(raw, dict):
        raise Invalid(key_path, f"expected a mapping, got {_type_name(raw)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    for key in raw:
        if key not in fields:
            raise Invalid(_join(key_path, str(key)), f"unknown key{_suggest(str(key), fields)}")
    hints = typing.get_type_hints(cls)
    values = dict(extra or {})
    for name, f in fields.items():
        sub_path = _join(key_path, name)
        if name in raw:
            values[name] = _coerce(hints[name], raw[name], sub_path)
            predicate, description = f.metadata.get("check", (None, ""))
            if predicate and values[name] is not None and not predicate(values[name]):
                raise Invalid(sub_path, f"expected {description}, got {raw[name]!r}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            expected = f.metadata.get("check", (None, _describe(hints[name])))[1]
            raise Invalid(sub_path, f"missing; add it ({expected})")
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
            raise Invalid(key_path, f"expected one of {_choices(args)}, got {value!r}")
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
        raise Invalid(key_path, f"expected {_describe(hint)}, got {value!r} ({_type_name(value)}){_yaml_number_hint(hint, value)}")
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
