"""The search stage: the Optuna study's trials run under the session's policies; and a worker
that joins a running study (`advisor worker`)."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Optional

from advisor import search
from advisor.config import AdvisorConfig
from advisor.errors import UserError
from advisor.evidence import Evidence
from advisor.harness.lifetime import SLOTS_ENV, measuring_here
from advisor.kinds import kind_of
from advisor.measure import QUIET_WAIT_S, Measurement, taken_again_once_quiet
from advisor.plan import active_recipes, plan_key
from advisor.secrets import shown
from advisor.session.bundle import Session, measure_with
from advisor.session.margins import RULE_OUT_UNDER
from advisor.session.planning import SessionFacts, check_same_workload
from advisor.session.policies import EarlyVerification, PlateauStop, StackSingles
from advisor.session.results import Hooks, Progress
from advisor.session.verification import Verified


def run_search(session: Session, study, verified: Verified, diagnosed_now: Optional[Evidence] = None) -> None:
    """Runs the study's trials until its budget, its deadline or a policy stops it. The
    policies stack what helped, verify a trial far over the bar at once, and stop at a plateau.
    `diagnosed_now`: the baseline's runs taken in this session, whose full run is the baseline's
    trial when it was measured as one (trial #0 then costs nothing)."""
    config, facts = session.config, session.facts
    measure = taken_again_when_quiet(session.measure, session.progress)
    if diagnosed_now is not None and baseline_trial_is_diagnosed(config, diagnosed_now):
        measure = with_first_run(measure, facts.baseline, diagnosed_now.full)
    budget = search.trial_budget(config, facts.space)
    policies = (StackSingles(session), EarlyVerification(session, verified),
                PlateauStop(session, verified, _search_patience(config)))
    session.progress(f"trials ({budget}, at most {config.search.time_budget_s:.0f} s), "
                     f"study in {shown(search.storage_url(config))}:")

    def heard_by_policies(finished: list[search.TrialResult]) -> None:
        for policy in policies:
            policy.after_trial(study, finished)

    def trial_done(*args) -> None:
        session.hooks.trial(*args)
        heard_by_policies(search.finished_trials(study, pruned=True))

    def stop_reason(study) -> str:
        finished = search.finished_trials(study, pruned=True)  # a pruned trial found nothing faster either
        return next((why for policy in policies if (why := policy.stop_reason(study, finished))), "")

    deadline = time.time() + config.search.time_budget_s
    if resumed := search.finished_trials(study, pruned=True):  # an early verification the stop cut off goes on from
        heard_by_policies(resumed)  # its kept rounds now, not after a new trial that may pick another and drop them
    search.run_trials(study, facts.space, facts.baseline, measure, budget, deadline,
                      config.constraints.max_memory_mb, session.progress, trial_done, stop_reason=stop_reason,
                      prune=prunable(config, facts.baseline), rule_out_under=RULE_OUT_UNDER)


def taken_again_when_quiet(measure: Callable[..., Measurement], progress: Progress,
                           quiet_wait_s: float = QUIET_WAIT_S) -> Callable[..., Measurement]:
    """`measure`, except that a trial run during which other processes took BUSY_SHARE or more of
    the CPU is taken once more after the machine quiets (`taken_again_once_quiet`), the quieter of the two
    kept: a trial is a single draw, and one slowed by the machine can rule out every plan that
    adds to it (`search.dominance`), the winner among them. A run stopped midway (pruned) or
    failed stands as it is."""

    def measure_quietly(plan: dict, **options) -> Measurement:
        return taken_again_once_quiet(lambda: measure(plan, **options), lambda run: (
            f"  other processes took {run.other_cpu_share:.0%} of the CPU during this trial's run: "
            "it is measured again once the machine is quiet"), progress, quiet_wait_s)

    return measure_quietly


def trial_recorder(study, facts: SessionFacts, config: AdvisorConfig,
                   hooks: Hooks) -> Callable[[dict, Measurement], search.TrialResult]:
    """Keeps a run of a plan found after the search as a trial of the study (logged as each
    trial is); a plan the study has a trial of already is answered with that trial."""

    def record(plan: dict, run: Measurement) -> search.TrialResult:
        key = plan_key(plan)
        same = [t for t in search.finished_trials(study, pruned=True) if plan_key(t.plan) == key]
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


def prunable(config: AdvisorConfig, baseline: dict) -> Callable[[dict], bool]:
    """Which plans may be stopped midway: none where the config or the kind says so; never one
    with a recipe that says its running rate midway says little of its end (compile)."""
    if not (config.search.prune and kind_of(config.kind).prunable):
        return lambda plan: False
    return lambda plan: all(recipe.prunable for recipe in active_recipes(plan, baseline))


def _search_patience(config: AdvisorConfig) -> int:
    """Trials in a row without a faster plan after which a search with a verified fix stops."""
    if config.search.patience is not None:
        return config.search.patience
    return max(3, config.search.trials // 4)


def join_study(config: AdvisorConfig, progress: Progress = lambda line: None, wait_s: float = 0.0) -> int:
    """`advisor worker`: runs trials of the study until its budget is spent, waiting up to
    `wait_s` for it to exist (workers of a job array start beside the optimize that makes it)."""
    study = wait_for_study(config, wait_s, progress)
    check_same_workload(config, study.user_attrs)
    facts = SessionFacts.from_attrs(study.user_attrs)
    _warn_if_sharing_the_machine(study, progress)
    return search.run_trials(
        study, facts.space, facts.baseline, measure_with(config), search.trial_budget(config, facts.space),
        time.time() + config.search.time_budget_s, config.constraints.max_memory_mb, progress,
        prune=prunable(config, facts.baseline), rule_out_under=RULE_OUT_UNDER,  # as the session that made the study
    )


def wait_for_study(config: AdvisorConfig, wait_s: float, progress: Progress = lambda line: None,
                   poll_s: float = 2.0):
    """The workload's study once it exists with the facts its session planned (made after the
    baseline's diagnosis), polled every `poll_s` for up to `wait_s`."""
    deadline, url = time.time() + wait_s, shown(search.storage_url(config))
    said = False
    while True:
        study = search.find_study(config, worker=True)
        if study is not None and search.SPACE_ATTR in study.user_attrs:
            return study
        if time.time() >= deadline:
            waited = f" after waiting {wait_s:.0f} s" if wait_s > 0 else " yet"
            raise UserError(f"no study '{config.name}' in {url}{waited}; start it with advisor optimize {config.path}, "
                            "or wait longer (--wait-s)")
        if not said:
            progress(f"waiting up to {wait_s:.0f} s for study '{config.name}' in {url} "
                     f"(advisor optimize {config.path} makes it once it has diagnosed the baseline) ...")
            said = True
        time.sleep(min(poll_s, max(0.0, deadline - time.time())))


def _warn_if_sharing_the_machine(study, progress: Progress) -> None:
    """Workers of one study on one machine time their trials at once, and each slows the other."""
    running = [t.user_attrs.get(search.WORKER_ATTR, "") for t in search.running_trials(study)]
    others = measuring_here(running)
    if others and not os.environ.get(SLOTS_ENV):
        progress(f"warning: another process on this machine ({others[0]}) is measuring trials of this study; "
                 "measurements taken at once slow each other and distort the ranking: start every process here "
                 f"with --slots 1 (or {SLOTS_ENV}=1) to take turns, or add workers on other machines")
