"""The trial loop: ask, measure, tell, until the budget, the deadline or a stop reason; each
trial's plan, measurement and feasibility recorded in the study, and read back as `TrialResult`.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import optuna
from optuna.trial import TrialState

from advisor.evidence import Progress
from advisor.failures import pruned
from advisor.harness.lifetime import interrupts_held, owner
from advisor.measure import Measurement
from advisor.plan import changes_text, plan_key
from advisor.recipes.base import IntRange, Param
from advisor.search import dominance
from advisor.search.heartbeat import beating, quiet_heartbeat, recover_stale_trials, retried, running_trials, wait_for_trials_under_way
from advisor.search.pruning import BehindTheBest, watcher
from advisor.search.records import (
    AT_MOST_ATTR,
    CONSTRAINT,
    COUNTED_STATES,
    INTERRUPTED_ATTR,
    MEASUREMENT_ATTR,
    PLAN_ATTR,
    RECORDED_ATTR,
    RULED_OUT_ATTR,
    SKIPPED_ATTR,
    WORKER_ATTR,
    TrialResult,
    counts,
    is_feasible_trial,
)
from advisor.search.space import distinct_plans, has_waiting, next_grid_plan, suggest, unmeasured_plan

Measure = Callable[[dict], Measurement]


MAX_REPEATS = 10  # plans in a row the sampler proposes that were measured already: the space is spent


def mark_interrupted(study: optuna.Study, trial: optuna.Trial) -> None:
    """Fails a trial stopped by an interrupt, marked to be run again (one already told stays as told)."""
    try:
        trial.set_user_attr(INTERRUPTED_ATTR, True)
        study.tell(trial, state=TrialState.FAIL)
    except RuntimeError:  # it was finished (skipped) before the interrupt came
        pass


def counted_trials(study: optuna.Study) -> int:
    again = frozenset(retried(study))
    return sum(1 for t in study.get_trials(deepcopy=False, states=COUNTED_STATES) if counts(t, again))


def skip_reason(study: optuna.Study, number: int, plan: dict, budget: int) -> str:
    """Why the trial just asked must not run, or "". Trials are ranked by number, so of two
    processes that asked for the last place at once, the later one yields."""
    again = frozenset(retried(study))
    trials = [t for t in study.get_trials(deepcopy=False, states=COUNTED_STATES) if t.number != number and counts(t, again)]
    if sum(1 for t in trials if t.number < number) >= budget:
        return "over the budget: another process took the last trial"
    key = plan_key(plan)
    if any(plan_key(t.user_attrs.get(PLAN_ATTR) or {}) == key
           for t in trials if t.state in (TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED)):
        return "a plan equal in effect was measured already, or is being measured"
    return ""


def run_trials(
    study: optuna.Study,
    space: dict[str, Param],
    baseline: dict,
    measure: Measure,
    budget_trials: int,
    deadline: float,
    max_memory_mb: Optional[float],
    progress: Progress = lambda line: None,
    on_trial: Callable[..., None] = lambda *args: None,
    stop_reason: Callable[[optuna.Study], str] = lambda study: "",
    prune: Callable[[dict], bool] = lambda plan: False,
    rule_out_under: float = 0.0,
) -> int:
    """Asks, measures and tells until the trial budget or the deadline is reached, or until
    `stop_reason` gives one; `on_trial` hears of each finished trial (number, plan, measurement
    dict, feasible, start, end). For a plan `prune` accepts, `measure` takes a `watch` (`watcher`):
    a trial clearly losing midway is stopped and told PRUNED (`BehindTheBest`); it counts as a trial.
    A plan adding to one that ran under `rule_out_under` times the baseline's trial is told
    skipped, unmeasured and uncounted (`dominance`). Returns the number of trials this process ran.

    Several processes may run this on one study at once; each trial is asked once, so none is
    lost, and no plan equal in effect (`plan_key`) to one measured or under way is run again: the
    budget counts distinct plans. Before it returns, it waits for the trials other processes are
    measuring, so the caller concludes on every finished measurement, and runs again any whose
    process died.
    """
    ran = repeats = 0
    trial_seconds = 0.0  # time spent in trials (not in a verification `on_trial` ran between them)
    study.pruner = BehindTheBest(max_memory_mb)
    whole_space = distinct_plans(space) <= budget_trials  # every distinct plan fits: no sampling
    while time.time() < deadline:
        recover_stale_trials(study)
        step = next_step(study, space, baseline, budget_trials, whole_space, progress)
        if step == "wait":
            wait_for_trials_under_way(study, deadline, progress)  # one may die and be queued again
            continue
        if step == "stop":
            break
        trial = None
        try:  # from the moment it exists: a trial left RUNNING by an interrupt would hold a place in the budget
            with quiet_heartbeat(), interrupts_held():  # created and named as ours in one step
                trial = study.ask()
                trial.set_user_attr(WORKER_ATTR, owner())
            plan = planned(trial, space, baseline)
            why = skip_reason(study, trial.number, plan, budget_trials) or ruled_out(study, trial, plan, baseline, rule_out_under)
            if why:
                repeats = skipped(study, trial, why, repeats, space, baseline, sampled=not whole_space)
                if repeats >= MAX_REPEATS:
                    progress(f"  the sampler proposed {MAX_REPEATS} plans in a row measured already or ruled out: the search stops here")
                    break
                continue
            repeats = 0
            started = time.time()
            with beating(study, trial):
                run = measure(plan, watch=watcher(trial)) if prune(plan) else measure(plan)
        except KeyboardInterrupt:
            if trial is not None:
                mark_interrupted(study, trial)
            raise
        feasible = told(study, trial, run, max_memory_mb)
        ran, trial_seconds = ran + 1, trial_seconds + time.time() - started
        eta = eta_seconds(trial_seconds, ran, counted_trials(study), budget_trials, deadline)
        progress(describe_trial(study, trial.number, plan, run, feasible, budget_trials, baseline, eta))
        on_trial(trial.number, plan, run.to_dict(), feasible, started, time.time())
        if why_stop := stop_reason(study):
            progress(f"  {why_stop}")
            wait_for_trials_under_way(study, deadline, progress)
            break
    return ran


def next_step(study: optuna.Study, space: dict[str, Param], baseline: dict, budget_trials: int, whole_space: bool,
              progress: Progress) -> str:
    """"run" the next trial; "wait" for those under way (the budget is spent, or the grid has no
    plan left, but one of them may die and be queued again); or "stop", saying why where the
    budget is not spent. Where the whole space is measured, the grid's next plan is queued."""
    spent = counted_trials(study) >= budget_trials
    if not spent and (not whole_space or queue_next_grid_plan(study, space, baseline)):
        return "run"
    if running_trials(study):
        return "wait"
    if not spent:
        progress("  every plan of the space is measured or ruled out: the search stops here")
    return "stop"


def planned(trial: optuna.Trial, space: dict[str, Param], baseline: dict) -> dict:
    """The trial's plan: the baseline with what the sampler suggests, recorded in the trial."""
    plan = {**baseline, **suggest(trial, space)}
    trial.set_user_attr(PLAN_ATTR, plan)
    return plan


def queue_next_grid_plan(study: optuna.Study, space: dict[str, Param], baseline: dict) -> bool:
    """Where every distinct plan fits the budget, the next one not yet measured (nor ruled out)
    is queued (none is sampled); whether a plan waits to run."""
    if has_waiting(study):
        return True
    params = next_grid_plan(study, space, baseline)
    if params is not None:
        study.enqueue_trial(params)
    return params is not None


def ruled_out(study: optuna.Study, trial: optuna.Trial, plan: dict, baseline: dict, under: float) -> str:
    """Why the trial's plan is not worth measuring (`dominance`), recorded in the trial; "" if it is."""
    loser = dominance.dominating(plan, dominance.losers(rated_trials(study), baseline, under), baseline) if under else None
    if loser is None:
        return ""
    trial.set_user_attr(RULED_OUT_ATTR, {"trial": loser.number, "changes": loser.changes, "ratio": loser.ratio})
    return dominance.ruled_out_reason(loser)


def rated_trials(study: optuna.Study) -> list[tuple[int, dict, float]]:
    """(number, plan, rate) of each trial measured whole, feasible with its results kept, and of
    each stopped midway, at the most it could have ended at (`pruning.final_at_most`)."""
    whole = [(t.number, t.plan, t.samples_per_s) for t in finished_trials(study) if t.feasible and t.measurement.ok]
    stopped = [(t.number, t.user_attrs.get(PLAN_ATTR, {}), t.user_attrs[AT_MOST_ATTR])
               for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)) if AT_MOST_ATTR in t.user_attrs]
    return whole + stopped


def skipped(study: optuna.Study, trial: optuna.Trial, why: str, repeats: int, space: dict[str, Param],
            baseline: dict, sampled: bool = True) -> int:
    """A trial not run, and why; the plans in a row the sampler proposed that were measured
    already or ruled out, counting this one (after one, the next trial is a plan it has not
    tried). A grid's plan ruled out is no repeat: the grid goes on to its next plan."""
    trial.set_user_attr(SKIPPED_ATTR, why)
    study.tell(trial, state=TrialState.FAIL)
    repeats = repeats + 1 if why.startswith("a plan") or (sampled and RULED_OUT_ATTR in trial.user_attrs) else 0
    fresh = unmeasured_plan(study, space, baseline, seed=trial.number) if repeats else None
    if fresh is not None:
        study.enqueue_trial(fresh, skip_if_exists=True)
    return repeats


def told(study: optuna.Study, trial: optuna.Trial, run: Measurement, max_memory_mb: Optional[float]) -> bool:
    """The trial's measurement recorded and its value told (pruned, or feasible or not); whether it was feasible."""
    feasible = is_feasible(run, max_memory_mb)
    trial.set_user_attr(MEASUREMENT_ATTR, run.to_dict())
    if pruned(run):
        study.tell(trial, state=TrialState.PRUNED)
    else:
        trial.set_constraint(CONSTRAINT, 0.0 if feasible else 1.0)
        study.tell(trial, run.samples_per_s if run.ok else 0.0)
    return feasible


def is_feasible(run: Measurement, max_memory_mb: Optional[float]) -> bool:
    return run.ok and (max_memory_mb is None or run.peak_memory_mb <= max_memory_mb)


def infeasible_reason(run: Measurement, max_memory_mb: Optional[float]) -> str:
    if not run.ok:
        return run.reason
    if max_memory_mb is not None and run.peak_memory_mb > max_memory_mb:
        return f"over the memory budget: peak {run.peak_memory_mb:,.0f} MB > {max_memory_mb:,.0f} MB"
    return ""


def record_trial(study: optuna.Study, space: dict[str, Param], plan: dict, run: Measurement,
                 max_memory_mb: Optional[float], where: str) -> TrialResult:
    """Keeps a run measured outside the search (a plan verification came upon) as a finished
    trial of the study, so that it has a number, counts as a plan measured, and the sampler
    learns from it. The plan must be one the study has no trial of (`taken_plans`)."""
    distributions = {key: optuna.distributions.IntDistribution(param.low, param.high, log=param.log)
                     if isinstance(param, IntRange) else optuna.distributions.CategoricalDistribution(list(param.options))
                     for key, param in space.items()}
    feasible = is_feasible(run, max_memory_mb)
    frozen = optuna.trial.create_trial(
        value=run.samples_per_s if run.ok else 0.0, params={key: plan[key] for key in space}, distributions=distributions,
        user_attrs={PLAN_ATTR: plan, MEASUREMENT_ATTR: run.to_dict(), RECORDED_ATTR: where},
        constraints={CONSTRAINT: 0.0 if feasible else 1.0})
    trial_id = study._storage.create_new_trial(study._study_id, template_trial=frozen)  # its number: add_trial keeps it
    return TrialResult(study._storage.get_trial_number_from_id(trial_id), plan, run, feasible)


def finished_trials(study: optuna.Study, pruned: bool = False) -> list[TrialResult]:
    """The trials measured whole; with `pruned`, those stopped midway too (never feasible: they
    count as trials that found nothing faster)."""
    results = []
    states = (TrialState.COMPLETE, TrialState.PRUNED) if pruned else (TrialState.COMPLETE,)
    for trial in study.get_trials(deepcopy=False, states=states):
        run = Measurement.from_dict(trial.user_attrs[MEASUREMENT_ATTR])
        feasible = trial.state == TrialState.COMPLETE and is_feasible_trial(trial)
        results.append(TrialResult(trial.number, trial.user_attrs[PLAN_ATTR], run, feasible))
    return results


def ruled_out_trials(study: optuna.Study) -> tuple[tuple[int, dict, dict, str], ...]:
    """The plans not measured as variants of a clearly slower one: (number, plan, the trial that
    ruled it out as {"trial", "changes", "ratio"}, why)."""
    return tuple((t.number, t.user_attrs.get(PLAN_ATTR, {}), t.user_attrs[RULED_OUT_ATTR], t.user_attrs.get(SKIPPED_ATTR, ""))
                 for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)) if RULED_OUT_ATTR in t.user_attrs)


def describe_trial(
    study: optuna.Study, number: int, plan: dict, run: Measurement, feasible: bool, budget: int, baseline: dict,
    eta_s: Optional[float] = None,
) -> str:
    changes = changes_text({k: v for k, v in plan.items() if v != baseline.get(k)}) or "baseline"
    trials = finished_trials(study)
    best = max((t for t in trials if t.feasible), key=lambda t: t.samples_per_s, default=None)
    base = next((t.samples_per_s for t in trials if t.number == 0), 0.0)
    outcome = (run.reason if pruned(run) else rate_text(run) if feasible
               else f"infeasible: {run.reason or 'over the memory budget'}")
    best_text = f"best {rate_text(best.measurement)}" if best else "best -"
    best_text += f" ({best.samples_per_s / base:.2f}x)" if best and base else ""
    done = counted_trials(study)
    eta = ("" if eta_s is None or eta_s < 1 or done >= budget else
           f"  ~{eta_s:.0f} s left" if eta_s < 90 else f"  ~{eta_s / 60:.0f} min left")
    return f"  trial #{number} [{done}/{budget}]  {changes}  ->  {outcome}   [{best_text}]{eta}"


def eta_seconds(trial_seconds: float, ran: int, done: int, budget: int, deadline: float) -> Optional[float]:
    """The search's time left: this process's mean time per trial times the trials left, at most the deadline."""
    if ran == 0:
        return None
    return max(0.0, min(trial_seconds / ran * max(0, budget - done), deadline - time.time()))


def rate_text(run: Measurement) -> str:
    """A run's result as its kind measures it: latency for a service, else rows, samples or (a
    script, whose steps advisor sees but not its batches) steps per second."""
    if run.latency:
        return f"p95 {run.latency['p95_ms']:.1f} ms, {run.latency['throughput_per_s']:,.0f} requests/s"
    unit = "rows/s" if run.stages else (run.environment or {}).get("unit", "samples/s")
    return f"{run.samples_per_s:,.0f} {unit}"
