"""What a session hands back: its recommendations, its rejections, the session as a whole, and
who hears of its work as it finishes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

from advisor import search
from advisor.config import AdvisorConfig
from advisor.evidence import Evidence
from advisor.findings import Diagnosis
from advisor.plan import active_recipes, changes_of, names
from advisor.recipes import Context
from advisor.verdict import PLAIN_LEVEL

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Recommendation:
    rank: int
    recipes: tuple[str, ...]
    plan: dict
    changes: dict
    speedup: float
    interval: tuple[float, float]
    verified: bool
    reason: str
    numerics: dict
    peak_memory_mb: float
    snippet: str
    trial: int
    samples_per_s: float
    # each recipe's one-off cost (a compile, cuDNN's autotuning, a cache's build) and when it is paid back
    one_off: dict = field(default_factory=dict)
    status: str = "verified"  # which rule decided its verdict (`advisor.verdict.Status`)
    confidence: float = PLAIN_LEVEL  # the level its interval was drawn at
    contributions: dict = field(default_factory=dict)
    step_breakdown_ms: dict = field(default_factory=dict)
    failed_runs: int = 0  # verification runs that crashed, hung or broke the budget: flaky when > 0
    busy_share: float = 0.0  # the most CPU other processes took during one of its judged verification runs
    rounds: int = 0  # the quiet verification rounds it was judged on
    set_aside_rounds: int = 0  # rounds set aside because other processes disturbed them (run again)
    set_aside_share: float = 0.0  # the most CPU other processes took in those
    ideal_speedup: Optional[float] = None  # input-bound jobs: the ideal over the baseline, in the first rounds (IDEAL_ROUNDS)
    ideal_source: str = ""  # where that ideal was measured: "rounds" (its verification's), "diagnosis" (one found early)
    gap_recovered: Optional[float] = None  # the share of the gap to that ideal the fix recovers
    latency_ms: dict = field(default_factory=dict)  # inference: p50, p95, p99 and cold start over its verification runs
    load_curve: list = field(default_factory=list)  # objective capacity: the rates its last run replayed (`capacity.Point`)
    leads_because: str = ""  # why it leads a fix with a higher speedup: that fix, measured beside it, ran slower
    speedup_basis: str = "objective"  # or "answered": at full load, the baseline near its limit (`speedup_basis`)
    epoch: dict = field(default_factory=dict)  # training with workers: an epoch's end, its share charged (`epoch_of`)
    page_faults_per_step: float = 0.0  # training: minor page faults a step over its verification runs
    settle_chance: Optional[float] = None  # not settled where its rounds stopped as unlikely to: its chance by the schedule's end
    pinned: bool = False  # its rounds ran to those search.precision asked for its number (`rounds_to_pin`)
    mlflow_run_id: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Rejection:
    plan_changes: dict
    recipes: tuple[str, ...]
    reason: str
    trial: Optional[int] = None

    @classmethod
    def of(cls, trial: "search.TrialResult", baseline: dict, reason: str) -> "Rejection":
        """A trial set aside, and why: what its plan changes from the baseline, by which recipes."""
        return cls(changes_of(trial.plan, baseline), names(active_recipes(trial.plan, baseline)), reason, trial.number)


@dataclass(frozen=True)
class SessionResult:
    config: AdvisorConfig
    evidence: Evidence
    diagnoses: list[Diagnosis]
    context: Context
    chosen: tuple[str, ...]
    skipped: dict[str, str]
    baseline: dict
    baseline_samples_per_s: float
    baseline_breakdown_ms: dict
    trials: list[search.TrialResult]
    recommendations: list[Recommendation]
    rejected: list[Rejection]
    started: float
    finished: float
    memory_fix: bool = False
    baseline_peak_mb: float = 0.0
    numerics_reference: str = "the baseline"  # whose results the candidates reproduce
    numerics_envelope: dict = field(default_factory=dict)  # how far rounding alone moves it (`Envelope.summary`)
    baseline_latency_ms: dict = field(default_factory=dict)  # inference: over the verification rounds' baseline runs
    baseline_epoch: dict = field(default_factory=dict)  # training with workers: over the baseline's verification runs
    baseline_page_faults_per_step: float = 0.0  # training: over the baseline's verification runs
    baseline_load_curve: list = field(default_factory=list)  # objective capacity: the rates the baseline's last run replayed
    first_verified_s: Optional[float] = None  # from the session's start to its first verified fix
    pruned: tuple = ()  # the trials stopped midway, clearly losing: (number, plan, reason, seconds of window unrun)
    ruled_out: tuple = ()  # plans not measured, variants of a clearly slower one: (number, plan, the loser it adds to, reason)
    loader_model: dict = field(default_factory=dict)  # the loader model's predictions beside the measurements

    @property
    def trials_run(self) -> int:
        """The trials measured, those stopped midway too: the budget random search is given."""
        return len(self.trials) + len(self.pruned)


@dataclass(frozen=True)
class Hooks:
    """Who hears of work as it finishes (the MLflow session log): each trial, each verdict."""

    trial: Callable[..., None] = lambda *args: None  # (number, plan, measurement dict, feasible, start, end)
    verdict: Callable[..., None] = lambda *args: None  # (name, plan, verdict dict, start, end)
