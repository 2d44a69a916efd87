"""Planning, the session's first stage: from the baseline's evidence to the recipes to try, the
search space and the first trials, stored in the study so that workers and resumes share them.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import asdict, dataclass, field
from typing import Optional

from advisor import loading, search
from advisor.config import AdvisorConfig
from advisor.diagnosis import collect_evidence, diagnose
from advisor.errors import UserError
from advisor.evidence import Evidence
from advisor.findings import THRESHOLDS, Diagnosis
from advisor.fingerprint import describe_changes, fingerprint
from advisor.kinds import kind_of
from advisor.recipes import RECIPES, Context, Param, Recipe, by_name
from advisor.report import busy_line
from advisor.session.claim import claim_study, release_unplanned
from advisor.session.results import Progress

ACTIONABLE = ("high", "moderate")


def plan_or_resume(config: AdvisorConfig, evidence: Optional[Evidence], warm_start: tuple[dict, ...],
                   progress: Progress) -> tuple[Optional[object], SessionFacts, list[Diagnosis], Optional[Evidence]]:
    """The workload's study resumed with the facts it stores, or the baseline diagnosed (unless
    `evidence` from an earlier diagnosis is given) and a new study made: the baseline first, then
    `warm_start`, then the textbook trials. Returns the study (None when there is nothing to
    search), the facts, the diagnoses (made once per session) and the evidence taken just now."""
    study = search.find_study(config)
    if study is not None and search.SPACE_ATTR in study.user_attrs:
        check_same_workload(config, study.user_attrs)
        study = claim_study(config)
        facts = SessionFacts.from_attrs(study.user_attrs)
        done = len(search.finished_trials(study))
        for line in resuming_lines(config.name, done, facts.evidence):
            progress(line)
        return study, facts, diagnose(facts.evidence), None
    claimed = claim_study(config)  # before the diagnosis: one diagnosis a study
    try:
        diagnosed_now = None
        if evidence is None:
            progress("diagnosing the baseline:")
            evidence = diagnosed_now = collect_evidence(config, progress)
        else:
            progress("using the given diagnosis of the baseline")
        diagnoses = diagnose(evidence)
        facts = plan_session(config, evidence, diagnoses)
        study = None
        if facts.space:
            first = (*warm_start, *textbook_params(facts))
            study = search.create_study(config, facts.space, {key: facts.baseline[key] for key in facts.space},
                                        facts.to_attrs(), first, claimed=claimed)
    finally:
        release_unplanned(config, claimed)
    return study, facts, diagnoses, diagnosed_now


def resuming_lines(name: str, done: int, evidence: Evidence) -> list[str]:
    """What a resume says of the study it takes up; a diagnosis taken on a busy machine (one the
    diagnosis could not wait out) is said again, since the whole study rests on it."""
    busy = busy_line((evidence.full, evidence.synthetic, evidence.cached), "the diagnosis")
    return [f"resuming study '{name}' ({done} trials done; the baseline's diagnosis is reused)",
            *(f"  {line}; `advisor optimize --fresh` diagnoses again and starts anew" for line in busy)]


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
    loader: dict = field(default_factory=dict)  # the loader model's costs and prediction (`loader_model`); {}: none

    def to_attrs(self) -> dict:
        return {
            "fingerprint": self.fingerprint,
            "loader": self.loader,
            "evidence": self.evidence.to_dict(),
            "context": asdict(self.context),
            "chosen": list(self.chosen),
            "skipped": self.skipped,
            "baseline": self.baseline,
        }

    @classmethod
    def from_attrs(cls, attrs: dict) -> SessionFacts:
        context = attrs["context"]
        return cls(
            evidence=Evidence.from_dict(attrs["evidence"]),
            context=Context(**{key: _tuples(value) for key, value in context.items()}),
            chosen=tuple(attrs["chosen"]),
            skipped=attrs["skipped"],
            baseline=attrs["baseline"],
            space=search.space_from_json(attrs[search.SPACE_ATTR]),
            fingerprint=attrs.get("fingerprint", {}),
            loader=attrs.get("loader", {}),
        )


def plan_session(config: AdvisorConfig, evidence: Evidence,
                 diagnoses: Optional[list[Diagnosis]] = None) -> SessionFacts:
    """From the baseline's evidence (and its diagnoses, when made already) to the recipes and the search space."""
    kind = kind_of(config.kind)
    context = _context(evidence, diagnose(evidence) if diagnoses is None else diagnoses, config)
    chosen, skipped = select_recipes(config.search.recipes, context, strict=kind.strict_recipes)
    space = search_space(chosen, context)
    baseline = spelled_out(kind.baseline_plan(config, kind.seen(evidence)), context)
    loader = loader_model(evidence, context, space, baseline, config.constraints.max_memory_mb)
    if loader:  # the prediction in the report's words, before the first trial
        loader["said"] = loader_said(loader, space[loading.WORKERS].high)
    return SessionFacts(
        evidence=evidence,
        context=context,
        chosen=tuple(r.name for r in chosen),
        skipped={**skipped, **{what: why for recipe in chosen for what, why in recipe.limits(context).items()}},
        # a key of the space the kind's baseline does not spell (a recipe newer than the kind) is off
        baseline={**baseline, **{key: value for recipe in chosen for key, value in recipe.settings_off().items()
                                 if key in space and key not in baseline}},
        space=space,
        fingerprint=fingerprint(config)["components"],
        loader=loader,
    )


def _context(evidence: Evidence, diagnoses: list[Diagnosis], config: AdvisorConfig) -> Context:
    """What the recipes are picked by: the bottlenecks to fix (those in an actionable band, and
    any that holds `Thresholds.reach` of the step or more, whatever its band: a large share
    left untried is a win left untried), every diagnosis's share of the step, and the fixes
    the evidence names."""
    context = kind_of(config.kind).context(evidence, to_fix(diagnoses), config)
    return dataclasses.replace(context, reach=tuple((d.bottleneck, round(d.share, 3)) for d in diagnoses
                                                    if d.bottleneck != "memory"),
                               named=tuple(dict.fromkeys(name for d in diagnoses for name in d.named)))


def to_fix(diagnoses: list[Diagnosis]) -> tuple[str, ...]:
    """The bottlenecks whose recipes are tried: those in an actionable band, and any that holds
    `Thresholds.reach` of the step or more, whatever its band."""
    return tuple(d.bottleneck for d in diagnoses
                 if d.severity in ACTIONABLE or (d.bottleneck != "memory" and d.share >= THRESHOLDS.reach))


def select_recipes(setting, context: Context, strict: bool = False) -> tuple[list[Recipe], dict[str, str]]:
    """The recipes to trial, and why each other one was left out.

    `auto` takes every applicable recipe that targets a diagnosed bottleneck, and those for what
    such a recipe unmasks (the read, once row-wise code is vectorised); a list names them
    (`strict`: a listed recipe that cannot run here is an error).
    """
    known = {recipe.name: recipe for recipe in RECIPES if context.kind in recipe.kinds}
    if setting == "auto":
        targeted = [r for r in known.values() if set(r.targets) & set(context.bottlenecks) or r.name in context.named]
        unmasked = {b for r in targeted if not r.why_not(context) for b in r.unmasks}
        wanted = [r for r in RECIPES if set(r.targets) & (set(context.bottlenecks) | unmasked) or r.name in context.named]
    else:
        names = [setting] if isinstance(setting, str) else list(setting)
        for name in names:
            if name not in known:
                close = difflib.get_close_matches(str(name), known, n=1)
                other = next((r for r in RECIPES if r.name == name), None)
                if other is not None:
                    kinds = ", ".join(other.kinds[:-1]) + " and " * (len(other.kinds) > 1) + other.kinds[-1]
                    raise UserError(f"search.recipes: {name} applies to {kinds} workloads, "
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
            skipped[recipe.name] = not_reached(recipe, context) if setting == "auto" else "not listed"
        elif reason:
            reached = reach_of(recipe, context)
            skipped[recipe.name] = f"{reason} (it could reach {reached[0]:.0%} of the step)" if reached else reason
        else:
            chosen.append(recipe)
    return chosen, skipped


def not_reached(recipe: Recipe, context: Context) -> str:
    """Why `auto` left a recipe out, in the share of the step it could have reached."""
    reached = reach_of(recipe, context)
    if reached is None:
        return "targets no diagnosed bottleneck"
    return (f"could reach {reached[0]:.0%} of the step ({reached[1]}, diagnosed low), under the {THRESHOLDS.reach:.0%} "
            "a fix is tried at whatever its band")


def reach_of(recipe: Recipe, context: Context) -> Optional[tuple[float, str]]:
    """The largest share of the step a diagnosis of what the recipe targets explains, and that
    bottleneck; None where none does."""
    return max(((share, bottleneck) for bottleneck, share in context.reach if bottleneck in recipe.targets), default=None)


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


def loader_model(evidence: Evidence, context: Context, space: dict, baseline: dict,
                 max_memory_mb: Optional[float] = None) -> dict:
    """The loader the model predicts from the baseline's costs (`advisor.loading`), where the
    space tunes the DataLoader's workers and the evidence has the costs; {} otherwise. Under a
    memory budget, the workers are those that fit beside the baseline's peak."""
    workers, threads = space.get(loading.WORKERS), space.get(loading.FETCH_THREADS)
    synthetic, full = evidence.synthetic, evidence.full
    costs = loading.costs_of(evidence.derived, synthetic.cpu_util if synthetic is not None and synthetic.ok else 0.0,
                             int(baseline.get("batch_size") or 0), context.cores)
    if workers is None or costs is None:
        return {}
    spare = max_memory_mb - full.peak_memory_mb if max_memory_mb is not None and full.ok else None
    fit = loading.workers_that_fit(costs, workers.high, spare)
    prediction = loading.predict(costs, fit, threads.options if threads is not None else (1,))
    if loading.INTRA_OP in space:  # the step's threads leave the loaders the cores they need
        prediction = dataclasses.replace(prediction, plan={
            **prediction.plan, loading.INTRA_OP: loading.step_threads(costs, prediction, space[loading.INTRA_OP].high)})
    return {"costs": asdict(costs), "prediction": prediction.to_dict(), "max_workers": fit}


def loader_said(loader: dict, most_workers: int) -> str:
    """The loader model's prediction in the report's words."""
    plan, prediction = loader["prediction"]["plan"], loader["prediction"]
    step = f", the step on {plan[loading.INTRA_OP]} intra-op thread(s)," if loading.INTRA_OP in plan else ""
    capped = (f" (the memory budget leaves room for {loader['max_workers']} worker(s) of "
              f"{loader['costs']['worker_mb']:,.0f} MB each)" if loader["max_workers"] < most_workers else "")
    return (f"loader model: {plan[loading.WORKERS]} worker(s) x {plan[loading.FETCH_THREADS]} fetch thread(s){step} "
            f"should reach {prediction['samples_per_s']:,.0f} samples/s, bound by {prediction['why']}{capped}")


def textbook_params(facts: SessionFacts) -> list[dict]:
    """The loader model's plan, then each chosen recipe at its textbook setting, on top of the
    baseline: the first trials after it, those that reach the largest share of the step first; then a
    recipe that unmasks a bottleneck together with each recipe for it (vectorised code with each
    read-side fix)."""
    singles = textbook_singles(facts)
    pairs = [(name, other) for name in singles for other in singles
             if other != name and set(by_name(name).unmasks) & set(by_name(other).targets)]
    base = textbook_plan(facts)
    predicted = [{**base, **{key: value for key, value in facts.loader["prediction"]["plan"].items() if key in facts.space}}
                 ] if facts.loader else []
    plans = []
    for params in [*predicted, *singles.values()] + [textbook_plan(facts, *pair) for pair in pairs]:
        if params != base and params not in plans:
            plans.append(params)
    return plans


def textbook_singles(facts: SessionFacts) -> dict[str, dict]:
    """Each chosen recipe's textbook setting alone on the baseline, by recipe, those that can
    reach the largest share of the step first (`_expected_reach`)."""
    ordered = sorted(facts.chosen, key=lambda name: _expected_reach(by_name(name), facts.context))
    return {name: textbook_plan(facts, name) for name in ordered}


def textbook_plan(facts: SessionFacts, *names: str) -> dict:
    """The baseline's settings of the space's keys, with the named recipes' textbook settings."""
    base = {key: facts.baseline[key] for key in facts.space}
    return {**base, **{k: v for name in names for k, v in by_name(name).textbook(facts.context).items() if k in facts.space}}


def _expected_reach(recipe: Recipe, context: Context) -> tuple:
    """Where a recipe's first trial goes: a fix for a job over its memory budget first, then by
    the largest share of the step the recipe can reach (what it can gain), then by the
    position of the first diagnosed bottleneck it targets."""
    over_budget = "memory" in recipe.targets and context.bottlenecks[:1] == ("memory",)
    share = (reach_of(recipe, context) or (0.0, ""))[0]
    position = min((i for i, b in enumerate(context.bottlenecks) if b in recipe.targets), default=len(context.bottlenecks))
    return (not over_budget, -share, position)


def check_same_workload(config: AdvisorConfig, attrs: dict) -> None:
    """A study's trials and evidence belong to the workload that made it: resuming or joining
    it after the code, the config's workload section or the environment changed would mix old
    measurements into new advice."""
    stored = attrs.get("fingerprint")
    changes = describe_changes(stored, fingerprint(config)["components"]) if stored else ["it records no fingerprint"]
    if changes:
        raise UserError(f"the study '{config.name}' in {search.storage_url(config)} was made for another workload "
                        f"({'; '.join(changes)}): run with --fresh to start over, or advisor retune for a deliberate change")


def _tuples(value):
    """JSON's lists as the tuples they were (a Context read back from the study)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value
