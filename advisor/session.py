"""One optimize session, as data flowing stage to stage:

evidence -> diagnoses -> candidate recipes -> trials (Optuna) -> numerics gate -> interleaved
verification (with each recipe's share by leaving it out) -> ranked recommendations.

After the textbook trial of each recipe, those that beat the baseline alone are tried together,
then those not shown to lose alone (`stacked_singles`). A trial far over the bar is verified as
soon as it is measured (`early_candidate`), so a user has advice to trust early; once a fix is
verified the search stops when it goes unbeaten (`plateau`) and every plan one step from the
best is measured (`search.unmeasured_neighbour`), and the end verifies only what could beat it
(`still_to_verify`).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from advisor import search
from advisor.advice import advice_for
from advisor.config import AdvisorConfig
from advisor.diagnose import THRESHOLDS, Diagnosis, diagnose
from advisor.errors import UserError
from advisor.evidence import Evidence, collect_evidence
from advisor.fingerprint import describe_changes, fingerprint
from advisor.harness import run_measurement
from advisor.kinds import kind_of
from advisor.measure import Measurement
from advisor.verify import (FIRST_LOOK, LOOK_CONFIDENCE, NumericsResult, interleave, judge, paired_interval, settled,
                            step_breakdown)
from recipes import RECIPES, Context, Param, Recipe, by_name
from recipes.compile import break_even_steps

Progress = Callable[[str], None]
RISK_ORDER = {"exact": 0, "tolerance": 1, "changes semantics": 2}
ACTIONABLE = ("high", "moderate")
MEMORY_TIE_SAVING = 0.10  # a lean fix leads an indistinguishable faster one when it saves this share
# A single trial is one noisy draw, and the best of several draws runs high: on the quickstart,
# trials of plans that all saturate the input ranged 1,400-1,800 samples/s in one session, and
# one trial ran 1.3x over its own verification rounds. So a trial must beat what it is
# compared with by this margin to count as clearly faster: over the bar, it is verified at once
# (the search goes on); over a verified fix, it is worth verifying too.
EARLY_MARGIN = 1.2
# A candidate that clears EARLY_MARGIN over the verified fix in its trial is run once more right
# after that fix (two runs) before its verification (three to five rounds): the trial was picked
# for running high, the pair is a fresh draw. Under this ratio it most likely ranks under the
# fix, and is not verified.
CONFIRM_MARGIN = 1.1
# The fastest candidate left needs less than EARLY_MARGIN over the verified fix: this much in its
# trial earns it that second draw beside the fix. A fix stacked on the first one often adds
# 10-20% (serve_encoder: inference_mode verified early; bf16 and compile on top of it ran 1.14x
# faster in their trial and went unverified under EARLY_MARGIN, 0.63x of the grid's best).
SECOND_LOOK_MARGIN = 1.1
# The recipes that beat the baseline's trial by min_speedup are stacked; then, in a second trial,
# those whose own trial ran at least this share of it: one trial each cannot tell a small loss
# from a gain its noise hid (serve_encoder, bench of 2026-11-24: the baseline's trial ran at
# 187/s, 174/s in later rounds; bf16 and inference mode alone read 0.93x and 0.92x of it, nothing
# was verified, and the two together ran 1.71x). Not the wider stack alone: in the next bench run
# it took in compile and quantization too (0.98x, 0.93x alone) and ran slower than bf16 with
# inference mode, the two that had beaten the baseline.
STACK_FLOOR = 0.9


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
    compile: dict = field(default_factory=dict)
    cache: dict = field(default_factory=dict)  # a Parquet cache's one-off cost and the runs it takes to pay off
    contributions: dict = field(default_factory=dict)
    step_breakdown_ms: dict = field(default_factory=dict)
    failed_runs: int = 0  # verification runs that crashed, hung or broke the budget: flaky when > 0
    busy_share: float = 0.0  # the most CPU other processes took during one of its verification runs
    ideal_speedup: Optional[float] = None  # input-bound jobs: the ideal over the baseline, in the same rounds
    gap_recovered: Optional[float] = None  # the share of the gap to that ideal the fix recovers
    latency_ms: dict = field(default_factory=dict)  # inference: p50, p95, p99 and cold start over its verification runs
    leads_because: str = ""  # why it leads a fix with a higher speedup: that fix, measured beside it, ran slower
    mlflow_run_id: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Rejection:
    plan_changes: dict
    recipes: tuple[str, ...]
    reason: str
    trial: Optional[int] = None


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
    baseline_latency_ms: dict = field(default_factory=dict)  # inference: over the verification rounds' baseline runs
    first_verified_s: Optional[float] = None  # from the session's start to its first verified fix
    pruned: tuple = ()  # the trials stopped midway, clearly losing: (number, plan, reason, seconds of window unrun)

    @property
    def trials_run(self) -> int:
        """The trials measured, those stopped midway too: the budget random search is given."""
        return len(self.trials) + len(self.pruned)


def cpu_has_bf16() -> bool:
    """Native bfloat16 on this CPU (x86 avx512_bf16 or AMX; Arm's bf16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags for flag in ("avx512_bf16", "amx_bf16", " bf16"))


MEMORY_FIX_HEADROOM = THRESHOLDS.memory_moderate  # at or above this share of the budget is memory-bound


def make_context(evidence: Evidence, diagnoses: list[Diagnosis], config: AdvisorConfig) -> Context:
    bottlenecks = tuple(d.bottleneck for d in diagnoses if d.severity in ACTIONABLE)
    return kind_of(config.kind).context(evidence, bottlenecks, config)


def select_recipes(setting, context: Context, strict: bool = False) -> tuple[list[Recipe], dict[str, str]]:
    """The recipes to trial, and why each other one was left out.

    `auto` takes every applicable recipe that targets a diagnosed bottleneck, and those for what
    such a recipe unmasks (the read, once row-wise code is vectorised); a list names them
    (`strict`: a listed recipe that cannot run here is an error).
    """
    known = {recipe.name: recipe for recipe in RECIPES if context.kind in recipe.kinds}
    if setting == "auto":
        targeted = [r for r in known.values() if set(r.targets) & set(context.bottlenecks)]
        unmasked = {b for r in targeted if not r.why_not(context) for b in r.unmasks}
        wanted = [r for r in RECIPES if set(r.targets) & (set(context.bottlenecks) | unmasked)]
    else:
        names = [setting] if isinstance(setting, str) else list(setting)
        for name in names:
            if name not in known:
                close = difflib.get_close_matches(str(name), known, n=1)
                other = next((r for r in RECIPES if r.name == name), None)
                if other is not None:
                    raise UserError(f"search.recipes: {name} applies to {' and '.join(other.kinds)} workloads, "
                                    f"not {context.kind}; remove it")
                hint = f"; did you mean '{close[0]}'?" if close else f"; known: {', '.join(known)}"
                raise UserError(f"search.recipes: unknown recipe {name!r}{hint}")
        wanted = [known[name] for name in names]
    chosen, skipped = [], {}
    for recipe in known.values():
        reason = recipe.why_not(context)
        if reason and setting != "auto" and recipe in wanted and strict:
            raise UserError(f"search.recipes: {recipe.name} cannot run here: it {reason}")
        if recipe not in wanted:
            skipped[recipe.name] = "targets no diagnosed bottleneck" if setting == "auto" else "not listed"
        elif reason:
            skipped[recipe.name] = reason
        else:
            chosen.append(recipe)
    return chosen, skipped


def search_space(recipes: list[Recipe], context: Context) -> dict[str, Param]:
    space: dict[str, Param] = {}
    for recipe in recipes:
        space.update(recipe.space(context))
    return space


def spelled_out(plan: dict, context: Context) -> dict:
    """A plan with torch's defaults written in, so it can be compared key by key with trials."""
    defaults = {"threads.intra_op": context.default_threads, "dataloader.prefetch_factor": 2}
    if "threads.inter_op" in plan:  # torch sizes its inter-op pool as its intra-op one: to the cores
        defaults["threads.inter_op"] = context.default_threads
    return {**plan, **{key: value for key, value in defaults.items() if plan.get(key) is None}}


def active_recipes(plan: dict, baseline: dict) -> tuple[Recipe, ...]:
    return tuple(r for r in RECIPES if r.active(effective(plan), effective(baseline)))


def effective(plan: dict) -> dict:
    """A plan with the keys that do nothing removed: prefetch and persistence need workers; a
    batcher's wait needs batches;
    Dask partitions need Dask, which reads in its own blocks (no chunks); a Parquet cache or
    chunks (which pyarrow cannot stream) leave no use for the pyarrow parser."""
    idle = set()
    if not plan.get("dataloader.num_workers"):
        idle |= {"dataloader.prefetch_factor", "dataloader.persistent_workers"}
    if (plan.get("dynamic_batching.max_batch") or 1) == 1:
        idle.add("dynamic_batching.max_wait_ms")
    if not plan.get("pipeline.dask_workers"):
        idle |= {"pipeline.dask_partitions", "pipeline.dask_scheduler"}
    elif plan.get("pipeline.chunksize"):
        idle.add("pipeline.chunksize")
    if plan.get("pipeline.parquet_cache") or (plan.get("pipeline.chunksize") and not plan.get("pipeline.dask_workers")):
        idle.add("pipeline.engine")
    return {k: v for k, v in plan.items() if k not in idle}


def plan_key(plan: dict) -> str:
    """What a plan does, as text: two plans with the same key run the same job."""
    return search.plan_identity(plan, effective)


def combined_risk(recipes: tuple[Recipe, ...]) -> str:
    return max((r.risk for r in recipes), key=RISK_ORDER.__getitem__, default="exact")


def tuples(value):
    """JSON's lists as the tuples they were (a Context read back from the study)."""
    return tuple(tuples(v) for v in value) if isinstance(value, list) else value


def snippet_for(plan: dict, recipes: tuple[Recipe, ...], context: Optional[Context] = None) -> str:
    """The code to paste; a recipe says more where the context has it (the user's own step by
    name, the rewritten row functions)."""
    def code(recipe: Recipe) -> str:
        told = recipe.snippet_in(plan, context) if context is not None and recipe.snippet_in else None
        return told or recipe.snippet(plan)

    return "\n\n".join(f"# {r.name}: {r.summary}\n{code(r)}" for r in recipes)


def measure_with(config: AdvisorConfig, capped: bool = True) -> Callable[[dict], Measurement]:
    """How a plan is measured: a full run in a fresh child, killed at `constraints.max_memory_mb`
    when `capped` (every trial and candidate); uncapped for the job as the user runs it today,
    the reference that candidates are compared with."""
    return kind_of(config.kind).measure(config, capped)


def outputs_folder(config: AdvisorConfig) -> Path:
    return config.root / "advisor-cache" / config.name / "outputs"


def output_path(config: AdvisorConfig, plan: dict, suffix: str) -> Path:
    """Where a plan's kept output goes: one file per plan (its runs agree), in advisor's own folder."""
    folder = outputs_folder(config)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{hashlib.sha256(plan_key(plan).encode()).hexdigest()[:16]}{suffix}"


def foreign_output(config: AdvisorConfig, candidate: Measurement, reference: Measurement, risk: str,
                   tolerance: float) -> Optional[NumericsResult]:
    """A failed comparison when either kept output lies outside advisor's own folder (never read); else None."""
    if all(own_output(config, run.output.get("path")) for run in (candidate, reference)):
        return None
    return NumericsResult(False, risk, math.inf, tolerance, 0, "an output lies outside advisor's own folder: not read")


def own_output(config: AdvisorConfig, path: Optional[str]) -> bool:
    """Whether a kept pipeline output lies in advisor's own outputs folder (paths come back
    from the study, which others may write: nothing outside that folder is ever unpickled)."""
    if not path:
        return True  # no output: compare_frames says so
    return Path(path).resolve().parent == outputs_folder(config).resolve()


@dataclass(frozen=True)
class Hooks:
    """Who hears of work as it finishes (the MLflow session log): each trial, each verdict."""

    trial: Callable[..., None] = lambda *args: None  # (number, plan, measurement dict, feasible, start, end)
    verdict: Callable[..., None] = lambda *args: None  # (name, plan, verdict dict, start, end)


def optimize(
    config: AdvisorConfig,
    progress: Progress = lambda line: None,
    warm_start: tuple[dict, ...] = (),
    evidence: Optional[Evidence] = None,
    hooks: Hooks = Hooks(),
    started: Optional[float] = None,
) -> SessionResult:
    """Diagnoses (unless `evidence` from an earlier diagnosis is given), searches, verifies.
    Resumes the workload's study when one exists. `started`: when the user's command began
    (the time to the first verified fix counts from it)."""
    started = time.time() if started is None else started
    diagnosed_now: Optional[Evidence] = None  # the baseline's runs taken in this session, just now
    study = search.find_study(config)
    if study is not None and search.SPACE_ATTR in study.user_attrs:
        check_same_workload(config, study.user_attrs)
        facts = SessionFacts.from_attrs(study.user_attrs)
        done = len(search.finished_trials(study))
        progress(f"resuming study '{config.name}' ({done} trials done; the baseline's diagnosis is reused)")
    else:
        if evidence is None:
            progress("diagnosing the baseline:")
            evidence = diagnosed_now = collect_evidence(config, progress)
        else:
            progress("using the given diagnosis of the baseline")
        facts = plan_session(config, evidence)
        study = None
        if facts.space:
            first = (*warm_start, *textbook_params(facts))
            study = search.create_study(
                config, facts.space, {key: facts.baseline[key] for key in facts.space}, facts.to_attrs(), first,
                canonical=effective,
            )
    diagnoses = diagnose(facts.evidence)
    if diagnoses:
        progress(f"bottleneck: {diagnoses[0].bottleneck}; trying: {', '.join(facts.chosen) or 'nothing'}")

    measure = measure_with(config)
    measure_trial = measure
    if diagnosed_now is not None and study is not None and baseline_trial_is_diagnosed(config, diagnosed_now):
        measure_trial = with_first_run(measure, facts.baseline, diagnosed_now.full)  # trial #0 costs nothing
    verified = Verified(started, progress, hooks)
    trials: list[search.TrialResult] = []
    if study is not None:
        budget = search.trial_budget(config, facts.space, effective)
        patience = search_patience(config)
        progress(f"trials ({budget}, at most {config.search.time_budget_s:.0f} s), study in {search.storage_url(config)}:")

        singles = textbook_singles(facts)

        def trial_done(*args) -> None:
            hooks.trial(*args)
            finished = search.finished_trials(study, pruned=True)
            # those that beat the baseline first, then those not shown to lose, where that differs
            for floor in (config.search.min_speedup, STACK_FLOOR):
                stack = stacked_singles(finished, singles, facts.baseline, floor)
                if stack is not None:  # once: a plan already in the study is not queued again
                    study.enqueue_trial(stack, skip_if_exists=True)
            if not verified.trial_numbers and config.search.verify_top > 0:  # one early verification at most
                early = early_candidate([t for t in finished if not search.pruned(t.measurement)], facts.baseline, config)
                if early is not None:
                    progress(f"  trial #{early.number} clears the bar by far: verifying it now, then the search goes on")
                    verified.add(*verify_each([early], facts.baseline, config, measure, False, progress,
                                              verified.heard, facts.context))

        around: Optional[search.TrialResult] = None  # whose neighbours the plateau measures

        def stop_reason(study) -> str:  # at a plateau, first the best plan's untried neighbours, then stop
            nonlocal around
            finished = search.finished_trials(study, pruned=True)  # a pruned trial found nothing faster either
            why = plateau(finished, verified.best_trial, patience, EARLY_MARGIN, verified.best_rate)
            if not why:
                return ""
            around = neighbourhood_of(finished, around)
            step = search.unmeasured_neighbour(study, facts.space, facts.baseline,
                                               {key: around.plan[key] for key in facts.space}, effective)
            if step is None:
                return (f"{why}, and every plan one step from trial #{around.number} (the best where the search "
                        f"levelled off) is measured")
            study.enqueue_trial(step, skip_if_exists=True)
            return ""

        search.run_trials(
            study, facts.space, facts.baseline, measure_trial, budget,
            time.time() + config.search.time_budget_s, config.constraints.max_memory_mb, progress, trial_done,
            canonical=effective, stop_reason=stop_reason, prune=prunable(config, facts.baseline),
        )
        trials = search.finished_trials(study)
    record = trial_recorder(study, facts, config, hooks) if study is not None else None
    result = conclude(config, facts, diagnoses, trials, measure, progress, started, hooks, verified, record)
    if study is None:
        return result
    return dataclasses.replace(result, pruned=search.pruned_trials(study), trials=search.finished_trials(study))


def trial_recorder(study, facts: "SessionFacts", config: AdvisorConfig,
                   hooks: Hooks) -> Callable[[dict, Measurement], search.TrialResult]:
    """Keeps a run of a plan found after the search as a trial of the study (logged as each
    trial is); a plan the study has a trial of already is answered with that trial."""

    def record(plan: dict, run: Measurement) -> search.TrialResult:
        key = search.plan_identity(plan, effective)
        same = [t for t in search.finished_trials(study, pruned=True) if search.plan_identity(t.plan, effective) == key]
        if same:
            return same[0]
        trial = search.record_trial(study, facts.space, plan, run, config.constraints.max_memory_mb,
                                    "run without a recipe that slowed #1, in its leave-one-out rounds")
        hooks.trial(trial.number, plan, run.to_dict(), trial.feasible, None, None)
        return trial

    return record


def baseline_trial_is_diagnosed(config: AdvisorConfig, evidence: Evidence) -> bool:
    """Whether the diagnosis's full run of the baseline is the baseline's trial already: the
    same plan, mode, steps and limits (no memory budget caps trials), so measuring it again
    would only cost time."""
    return (kind_of(config.kind).evidence_is_a_trial and config.constraints.max_memory_mb is None
            and evidence.full is not None and evidence.full.ok)


def with_first_run(measure: Callable[..., Measurement], plan: dict, run: Measurement) -> Callable[..., Measurement]:
    """`measure`, except that the first time it is asked for `plan` it answers `run`, taken already."""
    waiting = [dataclasses.replace(run, plan=plan)]

    def measure_once(asked: dict, **options) -> Measurement:
        if waiting and plan_key(asked) == plan_key(plan):
            return waiting.pop()
        return measure(asked, **options)

    return measure_once


@dataclass
class Verified:
    """The verdicts a session has reached so far (some during its search), and when it first
    had a fix to trust."""

    started: float
    progress: Progress = lambda line: None
    hooks: Hooks = Hooks()
    recommendations: list = field(default_factory=list)
    rejections: list = field(default_factory=list)
    baseline_runs: list = field(default_factory=list)
    first_s: Optional[float] = None

    def heard(self, name: str, plan: dict, verdict: dict, start: float, end: float) -> None:
        if verdict["verified"] and self.first_s is None:  # the moment a user has advice to trust
            self.first_s = end - self.started
            self.progress(f"first verified fix {self.first_s:.0f} s after the start: {name} "
                          f"{verdict['speedup']:.2f}x ({verdict['low']:.2f}-{verdict['high']:.2f}x)")
        self.hooks.verdict(name, plan, verdict, start, end)

    def add(self, recommendations: list, baseline_runs: list, rejections: list) -> None:
        self.recommendations += recommendations
        self.baseline_runs += baseline_runs
        self.rejections += rejections

    @property
    def trial_numbers(self) -> set[int]:
        """The trials judged so far: each became a recommendation or a rejection."""
        return {r.trial for r in self.recommendations} | {r.trial for r in self.rejections}

    @property
    def best_trial(self) -> Optional[int]:
        """The trial of the fastest verified fix, if any."""
        good = [r for r in self.recommendations if r.verified]
        return max(good, key=lambda r: r.speedup).trial if good else None

    @property
    def best_rate(self) -> float:
        """The fastest verified fix's mean rate in its verification rounds (0 if none)."""
        return max((r.samples_per_s for r in self.recommendations if r.verified and r.trial == self.best_trial), default=0.0)


def prunable(config: AdvisorConfig, baseline: dict) -> Callable[[dict], bool]:
    """Which plans may be stopped midway: none where the config or the kind says so; never one
    that compiles, whose cost lands unevenly in its first timed steps (recompiles, compile
    workers still busy), so that its running rate says little midway (measured:
    `python -m experiments.pruning` pruned the overhead job's winning compile plan)."""
    if not (config.search.prune and kind_of(config.kind).prunable):
        return lambda plan: False
    return lambda plan: "compile" not in names(active_recipes(plan, baseline))


def search_patience(config: AdvisorConfig) -> int:
    """Trials in a row without a faster plan after which a search with a verified fix stops."""
    if config.search.patience is not None:
        return config.search.patience
    return max(3, config.search.trials // 4)


def early_candidate(trials: list[search.TrialResult], baseline: dict, config: AdvisorConfig) -> Optional[search.TrialResult]:
    """The fastest trial so far whose speed in its trial clears the bar by EARLY_MARGIN and whose
    numerics match the baseline trial's: worth verifying at once. None while there is none, or
    when the baseline's trial did not run as it is (memory, SLO: those sessions verify at the end)."""
    base = next((t for t in trials if t.number == 0), None)
    if base is None or not base.measurement.ok or not base.feasible:
        return None
    bar = base.samples_per_s * config.search.min_speedup * EARLY_MARGIN
    fast = [t for t in trials if t.samples_per_s >= bar]
    candidates, _ = gate_candidates(fast, base.measurement, baseline, config, memory_fix=False)
    return candidates[0] if candidates else None


def plateau(trials: list[search.TrialResult], verified_trial: Optional[int], patience: int, margin: float,
            verified_rate: float = 0.0) -> str:
    """Why the search may stop now, or "": a fix is verified and the last `patience` trials
    found no plan faster than the best so far by `margin` (the session's EARLY_MARGIN: a
    smaller gain between two single trials is within their noise). The verified fix counts at
    `verified_rate` where that is higher than its trial: a trial within `margin` of that is no
    progress either. A pure function."""
    if verified_trial is None or patience <= 0:
        return ""
    best, since = 0.0, 0
    for trial in sorted(trials, key=lambda t: t.number):
        if trial.feasible and trial.samples_per_s >= best * margin:
            best, since = max(best, trial.samples_per_s), 0
        else:
            since += 1
        if trial.number == verified_trial:
            best = max(best, verified_rate)
    if since < patience:
        return ""
    return (f"the search stops: a fix is verified and the last {since} trials found no plan "
            f"{margin:.2f}x faster than the best so far (search.patience: {patience})")


def neighbourhood_of(trials: list[search.TrialResult], around: Optional[search.TrialResult]) -> search.TrialResult:
    """The trial whose one-step neighbours a plateau measures before the search stops: the best
    when the plateau is first reached, and another only once a trial beats it by EARLY_MARGIN
    (one round per plateau: moving to every new best would walk along the noise)."""
    best = max((t for t in trials if t.feasible), key=lambda t: t.samples_per_s)
    return best if around is None or best.samples_per_s >= around.samples_per_s * EARLY_MARGIN else around


def warn_if_sharing_the_machine(study, progress: Progress) -> None:
    """Workers of one study on one machine time their trials at once, and each slows the other."""
    from advisor.harness.lifetime import SLOTS_ENV, measuring_here

    running = [t.user_attrs.get(search.WORKER_ATTR, "") for t in study.get_trials(deepcopy=False, states=(search.TrialState.RUNNING,))]
    others = measuring_here(running)
    if others and not os.environ.get(SLOTS_ENV):
        progress(f"warning: another process on this machine ({others[0]}) is measuring trials of this study; "
                 "measurements taken at once slow each other and distort the ranking: start every process here "
                 f"with --slots 1 (or {SLOTS_ENV}=1) to take turns, or add workers on other machines")


def join_study(config: AdvisorConfig, progress: Progress = lambda line: None) -> int:
    """`advisor worker`: runs trials of an existing study until its budget is spent."""
    study = search.find_study(config, worker=True)
    if study is None or search.SPACE_ATTR not in study.user_attrs:
        raise UserError(
            f"no study '{config.name}' in {search.storage_url(config)} yet; start it with advisor optimize {config.path}"
        )
    check_same_workload(config, study.user_attrs)
    facts = SessionFacts.from_attrs(study.user_attrs)
    warn_if_sharing_the_machine(study, progress)
    return search.run_trials(
        study, facts.space, facts.baseline, measure_with(config), search.trial_budget(config, facts.space, effective),
        time.time() + config.search.time_budget_s, config.constraints.max_memory_mb, progress, canonical=effective,
        prune=prunable(config, facts.baseline),
    )


@dataclass(frozen=True)
class SessionFacts:
    """What a session decides before its trials; stored in the study so workers and resumes share it."""

    evidence: Evidence
    context: Context
    chosen: tuple[str, ...]
    skipped: dict
    baseline: dict
    space: dict
    fingerprint: dict = field(default_factory=dict)  # the workload's static fingerprint components

    def to_attrs(self) -> dict:
        return {
            "fingerprint": self.fingerprint,
            "evidence": self.evidence.to_dict(),
            "context": asdict(self.context),
            "chosen": list(self.chosen),
            "skipped": self.skipped,
            "baseline": self.baseline,
        }

    @classmethod
    def from_attrs(cls, attrs: dict) -> "SessionFacts":
        context = attrs["context"]
        return cls(
            evidence=Evidence.from_dict(attrs["evidence"]),
            context=Context(**{key: tuples(value) for key, value in context.items()}),
            chosen=tuple(attrs["chosen"]),
            skipped=attrs["skipped"],
            baseline=attrs["baseline"],
            space=search.space_from_json(attrs[search.SPACE_ATTR]),
            fingerprint=attrs.get("fingerprint", {}),
        )


def textbook_params(facts: "SessionFacts") -> list[dict]:
    """Each chosen recipe at its textbook setting, on top of the baseline: the first trials after
    it, those that fix the most severe bottleneck first; then a recipe that unmasks a bottleneck
    together with each recipe for it (vectorised code with each read-side fix)."""
    singles = textbook_singles(facts)
    pairs = [(name, other) for name in singles for other in singles
             if other != name and set(by_name(name).unmasks) & set(by_name(other).targets)]
    base = textbook_plan(facts)
    plans = []
    for params in [*singles.values()] + [textbook_plan(facts, *pair) for pair in pairs]:
        if params != base and params not in plans:
            plans.append(params)
    return plans


def textbook_singles(facts: "SessionFacts") -> dict[str, dict]:
    """Each chosen recipe's textbook setting alone on the baseline, by recipe, the most severe
    bottleneck's first."""
    ordered = sorted(facts.chosen, key=lambda name: severity_rank(by_name(name), facts.context))
    return {name: textbook_plan(facts, name) for name in ordered}


def textbook_plan(facts: "SessionFacts", *names: str) -> dict:
    """The baseline's settings of the space's keys, with the named recipes' textbook settings."""
    base = {key: facts.baseline[key] for key in facts.space}
    return {**base, **{k: v for name in names for k, v in by_name(name).textbook(facts.context).items() if k in facts.space}}


def stacked_singles(trials: list[search.TrialResult], singles: dict[str, dict], baseline: dict,
                    floor: float = STACK_FLOOR) -> Optional[dict]:
    """The textbook settings of every recipe whose own trial was not shown to lose (at least
    `floor` of the baseline's trial), all at once: the trial a person tuning by hand runs next
    (inference mode helped, bf16 helped: both). None until the baseline and each single has a
    finished trial, or when fewer than two qualify. Where two set one key, the faster trial's
    setting holds. A pure function."""
    finished = {search.plan_identity(t.plan, effective): t for t in trials}
    base = finished.get(search.plan_identity(baseline, effective))
    own = [finished.get(search.plan_identity({**baseline, **params}, effective)) for params in singles.values()]
    if base is None or not base.feasible or any(t is None for t in own):
        return None
    helped = sorted((t for t in own if t.feasible and t.samples_per_s >= base.samples_per_s * floor),
                    key=lambda t: t.samples_per_s, reverse=True)
    if len({t.number for t in helped}) < 2:
        return None
    space_keys = next(iter(singles.values())).keys()
    stack = {key: baseline[key] for key in space_keys}
    for trial in reversed(helped):  # the fastest last: its settings win a shared key
        stack.update({key: trial.plan[key] for key in space_keys if trial.plan[key] != baseline[key]})
    return stack


def severity_rank(recipe: Recipe, context: Context) -> int:
    """The position of the most severe diagnosed bottleneck the recipe targets."""
    return min((i for i, b in enumerate(context.bottlenecks) if b in recipe.targets), default=len(context.bottlenecks))


def plan_session(config: AdvisorConfig, evidence: Evidence) -> SessionFacts:
    """From the baseline's evidence to the recipes and the search space."""
    kind = kind_of(config.kind)
    context = make_context(evidence, diagnose(evidence), config)
    chosen, skipped = select_recipes(config.search.recipes, context, strict=kind.strict_recipes)
    return SessionFacts(
        evidence=evidence,
        context=context,
        chosen=tuple(r.name for r in chosen),
        skipped={**skipped, **step_limits(chosen, context)},
        baseline=spelled_out(kind.baseline_plan(config, kind.seen(evidence)), context),
        space=search_space(chosen, context),
        fingerprint=fingerprint(config)["components"],
    )


def step_limits(chosen: list[Recipe], context: Context) -> dict[str, str]:
    """What a chosen recipe cannot do around a step the user wrote, in the report's words."""
    if not context.step or context.device != "cuda" or "amp" not in names(tuple(chosen)):
        return {}
    return {"amp (float16)": f"float16 needs a GradScaler's calls inside {context.step} (scaler.scale(loss).backward(), "
                             "scaler.step(optimizer), scaler.update()); bfloat16, which needs none, is tried"}


def check_same_workload(config: AdvisorConfig, attrs: dict) -> None:
    """A study's trials and evidence belong to the workload that made it: resuming or joining
    it after the code, the config's workload section or the environment changed would mix old
    measurements into new advice."""
    stored = attrs.get("fingerprint")
    changes = describe_changes(stored, fingerprint(config)["components"]) if stored else ["it records no fingerprint"]
    if changes:
        raise UserError(f"the study '{config.name}' in {search.storage_url(config)} was made for another workload "
                        f"({'; '.join(changes)}): run with --fresh to start over, or advisor retune for a deliberate change")


def conclude(config, facts, diagnoses, trials, measure, progress, started, hooks: Hooks = Hooks(),
             verified: Optional[Verified] = None,
             record: Optional[Callable[[dict, Measurement], search.TrialResult]] = None,
             measure_reference: Optional[Callable[[dict], Measurement]] = None) -> SessionResult:
    """From the trials to ranked, verified recommendations. `verified` holds the verdicts the
    search already reached: those candidates are not measured again, nor those whose trial was
    not clearly faster than a fix already verified (they cannot plausibly beat it). `record`
    keeps a run of a plan found after the search as a trial of the study (`without_what_slows`).
    `measure_reference` measures the baseline as the user runs it (default: uncapped)."""
    verified = verified or Verified(started, progress, hooks)
    baseline, max_memory = facts.baseline, config.constraints.max_memory_mb
    base_trial = next((t for t in trials if t.number == 0), None)
    base_run = base_trial.measurement if base_trial else facts.evidence.full
    memory_fix = out_of_memory(base_run) or (max_memory is not None and base_run.ok and base_run.peak_memory_mb > max_memory)
    uncapped, broken = None, broken_constraint(base_run, max_memory)
    if broken:
        progress(f"the baseline breaks {broken}: running it once without it, as the reference ...")
        uncapped = (measure_reference or measure_with(config, capped=False))(baseline)
    reference, reference_note = numerics_reference(base_run, uncapped, trials, baseline, broken or "the memory budget")
    if memory_fix:
        progress(f"the baseline does not fit ({base_run.reason or f'peak {base_run.peak_memory_mb:,.0f} MB'}); "
                 f"numerics are compared with {reference_note}")
    candidates, rejected = gate_candidates(trials, reference, baseline, config, memory_fix)
    rejected = [r for r in rejected if r.trial not in verified.trial_numbers]
    candidates, passed_over = still_to_verify(candidates, trials, verified, config.search.verify_top, baseline)
    candidates, screened = confirm_beside_fix(candidates, verified, trials, measure, baseline, progress)
    rejected += screened
    baseline_latency = latency_of([base_run])
    input_bound = bool(diagnoses) and diagnoses[0].bottleneck.startswith("input")
    with_ideal = input_bound and bool(facts.evidence.derived.get("ideal_samples_per_s"))

    def verify(candidates: list[search.TrialResult]) -> list[Recommendation]:
        recommendations, baseline_runs, rejections = verify_each(
            candidates, baseline, config, measure, memory_fix, progress, verified.heard, facts.context,
            reference_plan=reference.plan, with_ideal=with_ideal, measure_reference=measure_reference)
        verified.add(recommendations, baseline_runs, rejections)
        return recommendations

    if candidates:
        verify(candidates)
    pairs = config.search.pairs
    recommendations, left_out = finish_ranking(verified.recommendations, baseline, measure, pairs, progress)
    if record is not None:
        recommendations = without_what_slows(
            recommendations, left_out, verify, record, max_memory,
            lambda ranked: with_shares(ranked, baseline, measure, pairs, progress), progress)
    advised = {r.trial for r in recommendations}  # a trial passed over, then verified without #1's slowing recipe
    rejected = [r for r in rejected + verified.rejections + passed_over if r.trial not in advised]
    baseline_breakdown = step_breakdown(verified.baseline_runs or [facts.evidence.full])
    if verified.baseline_runs:
        baseline_latency = latency_of(verified.baseline_runs)
    return SessionResult(
        config=config, evidence=facts.evidence, diagnoses=diagnoses, context=facts.context,
        chosen=facts.chosen, skipped=facts.skipped, baseline=baseline,
        baseline_samples_per_s=(base_run if base_run.ok else uncapped or facts.evidence.full).samples_per_s,
        baseline_breakdown_ms=baseline_breakdown,
        trials=trials, recommendations=recommendations, rejected=rejected,
        started=started, finished=time.time(), memory_fix=memory_fix,
        baseline_peak_mb=(base_run if base_run.ok else uncapped or facts.evidence.full).peak_memory_mb,
        numerics_reference=reference_note, baseline_latency_ms=baseline_latency,
        first_verified_s=verified.first_s,
    )


MEMORY_FAILURES = ("over the memory budget", "out of memory", "killed by SIGKILL")


def out_of_memory(run: Measurement) -> bool:
    """Whether a run failed for want of memory (at the budget, an allocation, or the OOM killer)."""
    return not run.ok and run.reason.startswith(MEMORY_FAILURES)


def broken_constraint(run: Measurement, max_memory: Optional[float]) -> Optional[str]:
    """The constraint a run failed for, in words: advisor's memory budget, or a service's SLO."""
    if out_of_memory(run) and max_memory is not None:
        return "the memory budget"
    if over_slo(run):
        return "the p95 SLO"
    return None


def over_slo(run: Measurement) -> bool:
    from advisor.kinds.infer import SLO_FAILURE

    return not run.ok and run.reason.startswith(SLO_FAILURE)


def numerics_reference(base_run: Measurement, uncapped: Optional[Measurement], trials: list[search.TrialResult],
                       baseline: dict, constraint: str = "the memory budget") -> tuple[Optional[Measurement], str]:
    """The run whose results every candidate must reproduce: the baseline's trial; where the
    baseline broke advisor's memory budget, the baseline run once without that cap; where it
    fits nowhere (the device's own memory), the fastest trial whose recipes are all exact
    (micro-batches, recomputation), which computes the same step in less memory."""
    if base_run.ok:
        return base_run, "the baseline"
    if uncapped is not None and uncapped.ok:
        return uncapped, f"the baseline run once without {constraint}"
    exact = [t for t in trials if t.feasible and active_recipes(t.plan, baseline)
             and combined_risk(active_recipes(t.plan, baseline)) == "exact"]
    if not exact:
        return None, "nothing: the baseline ran out of memory and no exact fix fitted"
    best = max(exact, key=lambda t: t.samples_per_s)
    return best.measurement, f"trial #{best.number} ({'+'.join(names(active_recipes(best.plan, baseline)))}, exact)"


def gate_candidates(
    trials: list[search.TrialResult],
    reference: Optional[Measurement],
    baseline: dict,
    config: AdvisorConfig,
    memory_fix: bool,
) -> tuple[list[search.TrialResult], list[Rejection]]:
    """Distinct feasible plans that change something, best first; numerics failures set aside.
    A memory fix must also leave the memory-bound band, not graze the budget."""
    seen, candidates, rejected = set(), [], []
    budget = config.constraints.max_memory_mb
    for trial in sorted(trials, key=lambda t: t.samples_per_s, reverse=True):
        recipes = active_recipes(trial.plan, baseline)
        key = tuple(sorted((k, str(v)) for k, v in effective(trial.plan).items()))
        if not recipes or key in seen:
            continue
        seen.add(key)
        if not trial.feasible:
            reason = search.infeasible_reason(trial.measurement, budget)
            rejected.append(Rejection(changes_of(trial.plan, baseline), names(recipes), reason, trial.number))
            continue
        if reference is None:
            rejected.append(Rejection(changes_of(trial.plan, baseline), names(recipes),
                                      "numerics: no run that fitted to compare with", trial.number))
            continue
        numerics = compare_outputs(trial.measurement, reference, combined_risk(recipes), config)
        if not numerics.passed:
            rejected.append(Rejection(changes_of(trial.plan, baseline), names(recipes), f"numerics: {numerics.note}", trial.number))
            continue
        if not memory_fix and trial.samples_per_s <= reference.samples_per_s:
            continue  # slower than the baseline in its trial: not worth verifying
        if memory_fix and budget is not None and trial.measurement.peak_memory_mb > MEMORY_FIX_HEADROOM * budget:
            continue
        candidates.append(trial)
    return candidates, rejected


def still_to_verify(candidates: list[search.TrialResult], trials: list[search.TrialResult], verified: Verified,
                    verify_top: int, baseline: dict) -> tuple[list[search.TrialResult], list[Rejection]]:
    """The candidates left to verify (best first): not judged already, and, once a fix is
    verified, only those whose trial beat it (its trial or its verification runs, whichever was
    faster) by EARLY_MARGIN, the fastest of them by SECOND_LOOK_MARGIN; `verify_top` in the
    session, all told. The others are within a trial's noise of the fix: verifying them would
    cost rounds and most likely rank them under it. Those that ran faster than the fix in their
    trial come back as rejections that say so, so no faster trial goes unexplained."""
    fresh = [t for t in candidates if t.number not in verified.trial_numbers]
    best = verified.best_trial
    passed_over: list[Rejection] = []
    if best is not None:
        fix_rate = max([t.samples_per_s for t in trials if t.number == best] + [verified.best_rate])
        kept = []
        for place, trial in enumerate(sorted(fresh, key=lambda t: t.samples_per_s, reverse=True)):
            margin = SECOND_LOOK_MARGIN if place == 0 else EARLY_MARGIN
            ratio = trial.samples_per_s / fix_rate if fix_rate > 0 else math.inf
            if ratio >= margin:
                kept.append(trial)
            elif ratio > 1.0:
                recipes = active_recipes(trial.plan, baseline)
                passed_over.append(Rejection(changes_of(trial.plan, baseline), names(recipes), (
                    f"not verified: {ratio:.2f}x the verified fix (trial #{best}) in its trial, under the "
                    f"{margin}x a single trial must beat it by (most likely no faster)"), trial.number))
        fresh = kept
    return fresh[: max(0, verify_top - len(verified.trial_numbers))], passed_over


def confirm_beside_fix(candidates: list[search.TrialResult], verified: Verified, trials: list[search.TrialResult],
                       measure: Callable[[dict], Measurement], baseline: dict,
                       progress: Progress) -> tuple[list[search.TrialResult], list[Rejection]]:
    """Once a fix is verified, each candidate still to verify is run again right after that fix,
    and kept only where it beats it by CONFIRM_MARGIN there: a cheap second draw before the
    costly one. Those set aside are returned as rejections that say why."""
    best = verified.best_trial
    fix = next((t for t in trials if t.number == best), None)
    if fix is None or not candidates:
        return candidates, []
    kept, screened = [], []
    for trial in candidates:
        fix_run, run = measure(fix.plan), measure(trial.plan)
        ratio = run.samples_per_s / fix_run.samples_per_s if run.ok and fix_run.ok and fix_run.samples_per_s > 0 else (
            math.inf if run.ok else 0.0)
        in_trial = trial.samples_per_s / fix.samples_per_s if fix.samples_per_s > 0 else math.inf
        if ratio >= CONFIRM_MARGIN:
            kept.append(trial)
            continue
        why = (f"not verified: {in_trial:.2f}x the verified fix (trial #{fix.number}) in its trial, "
               f"{ratio:.2f}x run again beside it (under {CONFIRM_MARGIN}x: most likely no faster)")
        progress(f"  trial #{trial.number}: {why}")
        recipes = active_recipes(trial.plan, baseline)
        screened.append(Rejection(changes_of(trial.plan, baseline), names(recipes), why, trial.number))
    return kept, screened


def verify_each(
    candidates: list[search.TrialResult],
    baseline: dict,
    config: AdvisorConfig,
    measure: Callable[[dict], Measurement],
    memory_fix: bool,
    progress: Progress,
    on_verdict: Callable[..., None] = lambda *args: None,
    context: Optional[Context] = None,
    reference_plan: Optional[dict] = None,
    with_ideal: bool = False,
    measure_reference: Optional[Callable[[dict], Measurement]] = None,
) -> tuple[list[Recommendation], list[Measurement], list[Rejection]]:
    """Re-measures the candidates interleaved with the reference (the baseline, run as the user
    runs it: without the memory budget the candidates must keep): FIRST_LOOK rounds when every
    speed verdict is then settled, else `search.pairs` (each look at LOOK_CONFIDENCE).
    `with_ideal` adds the baseline fed one reused batch to every round: the ideal an input fix
    can reach, measured beside it, so the share of the gap a fix recovers compares like with like.
    `measure_reference` measures the reference (default: the job as the user runs it, uncapped).

    Returns the recommendations (unranked), the reference's runs and the rejections."""
    plans = {f"#{t.number}": t for t in candidates}
    reference_plan = reference_plan or baseline
    arms = {name: t.plan for name, t in plans.items()}
    ideal_plan = dict(reference_plan)  # told apart by identity: the same plan, another mode
    if with_ideal:
        arms["ideal"] = ideal_plan
    capped = measure

    def measure(plan: dict) -> Measurement:
        if plan is ideal_plan:
            return run_measurement(config, plan, "synthetic", config.measure.steps, config.measure.timeout_s)
        return capped(plan)

    min_speedup, pairs = config.search.min_speedup, config.search.pairs

    def enough(rounds) -> bool:  # memory fixes are judged on every run: they take all rounds
        return (len(rounds.baseline) == FIRST_LOOK and not memory_fix
                and all(settled(rounds.ratios(name), min_speedup, rounds.failures(name)) for name in plans))

    progress(f"verifying {len(plans)} candidate(s), interleaved with the baseline{' and the ideal' if with_ideal else ''}, "
             f"{FIRST_LOOK} rounds, {pairs} unless every verdict is clear by then:")
    verify_started = time.time()
    rounds = interleave(reference_plan, arms, measure, pairs, progress,
                        measure_reference=measure_reference or measure_with(config, capped=False), enough=enough)
    verify_finished = time.time()
    ideal_ratios = rounds.ratios("ideal") if with_ideal else []
    ideal_speedup = paired_interval(ideal_ratios)[0] if ideal_ratios else None

    recommendations, rejections = [], []
    for name, trial in plans.items():
        runs = rounds.candidates[name]
        recipes = active_recipes(trial.plan, baseline)
        numerics = worst_numerics(runs, rounds.baseline, combined_risk(recipes), config)
        verdict = judge(
            name, rounds.ratios(name), min_speedup, numerics, memory_fix,
            [r.peak_memory_mb for r in runs if r.ok], config.constraints.max_memory_mb,
            failures=rounds.failures(name), pairs=len(rounds.baseline), confidence=LOOK_CONFIDENCE,
            disturbed=rounds.disturbed(name),
        )
        on_verdict(name, trial.plan, verdict.to_dict(), verify_started, verify_finished)
        if numerics is not None and not numerics.passed:
            rejections.append(Rejection(changes_of(trial.plan, baseline), names(recipes), verdict.reason, trial.number))
            continue
        recommendations.append(
            Recommendation(
                rank=0, recipes=names(recipes), plan=trial.plan, changes=changes_of(trial.plan, baseline),
                speedup=verdict.speedup, interval=(verdict.low, verdict.high), verified=verdict.verified,
                reason=verdict.reason, numerics=asdict(numerics) if numerics else {},
                peak_memory_mb=verdict.peak_memory_mb, snippet=snippet_for(trial.plan, recipes, context),
                trial=trial.number, samples_per_s=mean_rate(runs),
                compile=compile_cost(runs, rounds.baseline, kind_of(config.kind).per) if "compile" in names(recipes) else {},
                cache=cache_cost(runs, rounds.baseline) if "parquet_cache" in names(recipes) else {},
                step_breakdown_ms=step_breakdown(runs), failed_runs=len(verdict.failures),
                busy_share=max((r.other_cpu_share for r in [*runs, *rounds.baseline] if r.ok), default=0.0),
                ideal_speedup=ideal_speedup, gap_recovered=gap_recovered(verdict.speedup, 1.0, ideal_speedup),
                latency_ms=latency_of(runs),
            )
        )
    return recommendations, rounds.baseline, rejections


def finish_ranking(recommendations: list[Recommendation], baseline: dict, measure, pairs: int,
                   progress: Progress) -> tuple[list[Recommendation], dict]:
    """Ranks the recommendations, and gives #1 its recipes' shares (`with_shares`)."""
    return with_shares(renumbered(rank(recommendations)), baseline, measure, pairs, progress)


def with_shares(ranked: list[Recommendation], baseline: dict, measure, pairs: int,
                progress: Progress) -> tuple[list[Recommendation], dict]:
    """When #1 combines recipes and its shares are not measured yet, measures it again beside
    itself without each one, to give each recipe's share. Returns the ranking and, by recipe,
    the plan without it with its runs ({} when nothing was measured)."""
    if not ranked or len(ranked[0].recipes) < 2 or ranked[0].contributions:
        return ranked, {}
    shares, left_out = leave_one_out(ranked[0], baseline, measure, pairs, progress)
    return [dataclasses.replace(ranked[0], contributions=shares), *ranked[1:]], left_out


def slowing_recipe(top: Recommendation, max_memory_mb: Optional[float]) -> Optional[str]:
    """The recipe #1 runs clearly fastest without (its share's interval wholly under 1x), among
    those it does not need to keep within the memory budget; None when none slows it. A pure function."""
    slowing = {recipe: share["factor"] for recipe, share in top.contributions.items()
               if not share.get("needed_for_budget") and share["interval"][1] < 1.0
               and not (max_memory_mb is not None and share.get("peak_without_mb", 0.0) > max_memory_mb)}
    return min(slowing, key=slowing.get) if slowing else None


def without_what_slows(ranked: list[Recommendation], left_out: dict, verify: Callable[[list], list[Recommendation]],
                       record: Callable[[dict, Measurement], search.TrialResult], max_memory_mb: Optional[float],
                       shares: Callable[[list], tuple[list, dict]], progress: Progress) -> list[Recommendation]:
    """When #1 runs clearly faster without one of its recipes, that plan is the advice: kept as
    a trial (its first run in the leave-one-out rounds; a trial of the same plan, where the
    study has one), verified against the baseline as every candidate is, and ranked first when
    verified, since its rounds beside #1 already showed it the faster. Then its own shares are
    measured, and so on, once per recipe of the first #1 at most. `verify` gives the candidates'
    recommendations; `shares` is `with_shares` for a ranking."""
    for _ in range(len(ranked[0].recipes) if ranked else 0):
        top = ranked[0]
        recipe = slowing_recipe(top, max_memory_mb)
        plan, runs = left_out.get(recipe, ({}, []))
        measured = next((run for run in runs if run.ok), None)
        if measured is None:
            break
        trial = record(plan, measured)
        if trial.number in {r.trial for r in ranked}:
            break
        factor, (low, high) = top.contributions[recipe]["factor"], top.contributions[recipe]["interval"]
        faster = f"{1 / factor:.2f}x faster without {recipe} ({1 / high:.2f}-{1 / low:.2f}x, beside it in the same rounds)"
        progress(f"#1 runs {faster}: verifying it without {recipe}, as trial #{trial.number}")
        found = verify([trial])
        if not found or not found[0].verified:
            return renumbered(ranked + found)
        lead = dataclasses.replace(found[0], leads_because=f"leads: trial #{top.trial}, {'+'.join(top.recipes)}, ran {faster}")
        ranked, left_out = shares(renumbered([lead, *ranked]))
    return ranked


def renumbered(ranked: list[Recommendation]) -> list[Recommendation]:
    return [dataclasses.replace(r, rank=index) for index, r in enumerate(ranked, start=1)]


def without_recipe(plan: dict, baseline: dict, recipe: str) -> dict:
    """The plan with one recipe's keys as the baseline has them; a key the baseline lacks (a
    service's inter-op threads, on a training job) is left out."""
    changed = dict(plan)
    for key in by_name(recipe).keys:
        if key in baseline:
            changed[key] = baseline[key]
        else:
            changed.pop(key, None)
    return changed


def leave_one_out(top: Recommendation, baseline: dict, measure, pairs: int, progress: Progress) -> tuple[dict, dict]:
    """Each recipe's factor: the plan against itself without that recipe, paired round by round.
    Returns the shares, and by recipe the plan without it with its runs."""
    without = {recipe: without_recipe(top.plan, baseline, recipe) for recipe in top.recipes}
    progress(f"measuring each recipe's share of #1 by leaving it out, {pairs} rounds:")
    rounds = interleave(top.plan, {f"without {recipe}": plan for recipe, plan in without.items()}, measure, pairs,
                        progress, reference="#1")
    shares = {}
    for recipe in top.recipes:
        factors = [1 / ratio for ratio in rounds.ratios(f"without {recipe}") if ratio > 0]
        if any(out_of_memory(run) for run in rounds.candidates[f"without {recipe}"]):
            shares[recipe] = {"factor": math.inf, "interval": (math.inf, math.inf), "shown": True, "needed_for_budget": True}
        elif factors:
            factor, low, high = paired_interval(factors)
            peaks = [r.peak_memory_mb for r in rounds.candidates[f"without {recipe}"] if r.ok]
            shares[recipe] = {"factor": factor, "interval": (low, high), "shown": low > 1.0,
                              "peak_without_mb": max(peaks, default=0.0)}
    return shares, {recipe: (plan, rounds.candidates[f"without {recipe}"]) for recipe, plan in without.items()}


def rank(recommendations: list[Recommendation]) -> list[Recommendation]:
    """Verified first, fastest first; but when a fix the measurements cannot tell apart from the
    fastest (its interval reaches the fastest's speedup) needs much less memory, it leads."""
    ordered = sorted(recommendations, key=lambda r: (not r.verified, -r.speedup))
    if not ordered:
        return ordered
    best = ordered[0]
    tied = [r for r in ordered if r.verified == best.verified and r.interval[1] >= best.speedup]
    leanest = min(tied, key=lambda r: r.peak_memory_mb)
    if leanest.peak_memory_mb < (1 - MEMORY_TIE_SAVING) * best.peak_memory_mb:
        return [leanest] + [r for r in ordered if r is not leanest]
    return ordered


def compare_outputs(candidate: Measurement, baseline: Measurement, risk: str, config: AdvisorConfig) -> NumericsResult:
    """Whether a candidate's results are the baseline's, as its kind compares them."""
    return kind_of(config.kind).compare(candidate, baseline, risk, config)


def worst_numerics(runs, baseline_runs, risk, config):
    runs, baseline_runs = kind_of(config.kind).compared_runs(runs, baseline_runs)
    results = [compare_outputs(c, b, risk, config) for c, b in zip(runs, baseline_runs) if c.ok and b.ok]
    return max(results, key=lambda r: (not r.passed, r.max_rel_diff), default=None)


def compile_cost(runs: list[Measurement], baseline_runs: list[Measurement], per: str = "step") -> dict:
    """Compile time (warm-up beyond steady steps or requests) and the steps (`per`) after which it pays off."""
    good = [r for r in runs if r.ok and r.warmup_ms]
    base = [r for r in baseline_runs if r.ok]
    if not good or not base:
        return {}
    step_ms = sum(r.step_ms_mean for r in good) / len(good)
    base_ms = sum(r.step_ms_mean for r in base) / len(base)
    compile_s = sum(max(0.0, (sum(r.warmup_ms) - len(r.warmup_ms) * step_ms) / 1000) for r in good) / len(good)
    return {"compile_s": compile_s, "break_even_steps": break_even_steps(compile_s, base_ms / 1000, step_ms / 1000),
            "per": per}


def cache_cost(runs: list[Measurement], baseline_runs: list[Measurement]) -> dict:
    """The Parquet cache's one-off build time, and the runs after which it has paid for itself."""
    build = max((r.stages.get("cache_build_s", {}).get("wall_s", 0.0) for r in runs if r.ok), default=0.0)
    saved = mean_wall(baseline_runs) - mean_wall(runs)
    return {"build_s": build, "pays_off_after_runs": math.ceil(build / saved) if saved > 0 else None}


def mean_wall(runs: list[Measurement]) -> float:
    good = [r.stages["wall_s"] for r in runs if r.ok and r.stages]
    return sum(good) / len(good) if good else 0.0


def latency_of(runs: list[Measurement]) -> dict:
    """Inference: each latency figure averaged over the runs that have one."""
    good = [r.latency for r in runs if r.ok and r.latency]
    keys = ("p50_ms", "p95_ms", "p99_ms", "cold_start_ms")
    return {key: sum(lat[key] for lat in good) / len(good) for key in keys} if good else {}


def mean_rate(runs: list[Measurement]) -> float:
    good = [r.samples_per_s for r in runs if r.ok]
    return sum(good) / len(good) if good else 0.0


def changes_of(plan: dict, baseline: dict) -> dict:
    return {k: v for k, v in effective(plan).items() if v != baseline.get(k)}


def names(recipes: tuple[Recipe, ...]) -> tuple[str, ...]:
    return tuple(r.name for r in recipes)


def gap_recovered(speedup: float, baseline_rate: float, ideal_rate: Optional[float]) -> Optional[float]:
    """The share of the gap between the baseline and the ideal (synthetic-batch) throughput that
    a fix recovers: the physical limit for input fixes is the ideal."""
    if not ideal_rate or not baseline_rate or ideal_rate <= baseline_rate:
        return None
    return (speedup * baseline_rate - baseline_rate) / (ideal_rate - baseline_rate)


def session_payload(result: SessionResult, print_fingerprint: dict) -> dict:
    """The `recommendations.json` contract (also the MLflow artifact)."""
    config = result.config
    return {
        "workload": config.name,
        "config": str(config.path),
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(result.started)),
        "duration_s": result.finished - result.started,
        "first_verified_s": result.first_verified_s,
        "fingerprint": print_fingerprint["digest"],
        "fingerprint_components": print_fingerprint["components"],
        "unit": kind_of(config.kind).unit(config),
        "baseline": {
            "plan": result.baseline,
            "samples_per_s": result.baseline_samples_per_s,
            "peak_memory_mb": result.baseline_peak_mb,
            "measurement": result.evidence.full.to_dict(),
            "ideal_samples_per_s": result.evidence.derived.get("ideal_samples_per_s"),
            "step_breakdown_ms": result.baseline_breakdown_ms,
            "latency_ms": result.baseline_latency_ms,
        },
        "diagnoses": [d.to_dict() for d in result.diagnoses],
        "advice": advice_for(result.evidence.profile.hotspots, result.evidence.profile.environment.get("row_functions")) if any(
            d.bottleneck == "python" for d in result.diagnoses) else [],
        "row_functions": result.evidence.profile.environment.get("row_functions", []),
        "row_wise_share": result.evidence.profile.hotspots.get("callback_share"),
        "recipes_tried": list(result.chosen),
        "recipes_skipped": result.skipped,
        "min_speedup": config.search.min_speedup,
        "memory_fix": result.memory_fix,
        "baseline_failure": next((t.measurement.reason for t in result.trials if t.number == 0 and not t.measurement.ok), ""),
        "numerics_reference": result.numerics_reference,
        "max_memory_mb": config.constraints.max_memory_mb,
        "recommendations": [r.to_dict() for r in result.recommendations],
        "rejected": [asdict(r) for r in result.rejected],
        "trials": [
            {"number": t.number, "plan": t.plan, "feasible": t.feasible, "measurement": t.measurement.to_dict()}
            for t in result.trials
        ],
        "pruned": [{"number": number, "plan": plan, "reason": reason, "unrun_s": unrun}
                   for number, plan, reason, unrun in result.pruned],
        "pruned_unrun_s": sum(unrun for *_, unrun in result.pruned),  # what pruning saved, at the trials' pace
    }
