"""One optimize session, top to bottom: plan, search, gate, verify, rank, record.

Each stage is a module of this package and takes the one frozen bundle of what the session
knows (`Session`); the verdicts reached so far live in one ledger (`Verified`), which the search
adds to when it verifies a trial early.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional

from advisor import loading, search
from advisor.config import AdvisorConfig
from advisor.evidence import Evidence
from advisor.harness import launch
from advisor.kinds import forks_from_server, kind_of
from advisor.measure import Measurement, epoch_of, page_faults_of
from advisor.session.bundle import Session
from advisor.session.gate import with_reference
from advisor.session.planning import plan_or_resume
from advisor.session.ranking import rank_session
from advisor.session.results import Hooks, Progress, Recommendation, Rejection, SessionResult
from advisor.session.trials import run_search, trial_recorder
from advisor.session.verification import Verified, choose_candidates, latency_of, load_curve_of, pin_early_fix, verify_candidates
from advisor.verify import step_breakdown


def optimize(config: AdvisorConfig, progress: Progress = lambda line: None, warm_start: tuple[dict, ...] = (),
             evidence: Optional[Evidence] = None, hooks: Hooks = Hooks(), started: Optional[float] = None) -> SessionResult:
    """Diagnoses (unless `evidence` from an earlier diagnosis is given), searches, verifies, ranks.
    Resumes the workload's study when one exists. `started`: when the user's command began (the
    time to the first verified fix counts from it)."""
    started = time.time() if started is None else started
    preload_kind(config)
    study, facts, diagnoses, diagnosed_now = plan_or_resume(config, evidence, warm_start, progress)
    if diagnoses:
        progress(f"bottleneck: {diagnoses[0].bottleneck}; trying: {', '.join(facts.chosen) or 'nothing'}")
    if facts.loader:
        progress(facts.loader["said"] + ": its plan is the first trial")
    session = Session(config, facts, diagnoses, progress=progress, hooks=hooks, started=started, study=study)
    verified = Verified(started, progress, hooks)
    if study is None:  # nothing to search: the baseline alone
        return conclude(session, [], verified)
    run_search(session, study, verified, diagnosed_now)
    result = conclude(session, search.finished_trials(study), verified, trial_recorder(study, facts, config, hooks))
    return dataclasses.replace(result, pruned=search.pruned_trials(study), trials=search.finished_trials(study),
                               ruled_out=search.ruled_out_trials(study))


def preload_kind(config: AdvisorConfig) -> None:
    """Where the runs fork from the fork server, it imports the kind's modules once (`Kind.preload`),
    as `advisor.api` has it warm up: a session started without it (the bench, a library call)
    would import them in each run (torch._dynamo: 1 s a run here, and a run's pace that swings)."""
    if forks_from_server(config):
        launch.use_preload(kind_of(config).preload)


def conclude(session: Session, trials: list[search.TrialResult], verified: Optional[Verified] = None,
             record: Optional[Callable[[dict, Measurement], search.TrialResult]] = None) -> SessionResult:
    """From the trials to ranked, verified recommendations. `verified` holds the verdicts the
    search already reached: those candidates are not measured again, nor those whose trial was
    not clearly faster than a fix already verified. `record` keeps a run of a plan found after
    the search as a trial of the study (`ranking.without_what_slows`)."""
    verified = verified or Verified(session.started, session.progress, session.hooks)
    session = with_reference(session, trials)
    candidates, rejected, passed_over = choose_candidates(session, trials, verified)
    verify_candidates(session, candidates, verified)
    pin_early_fix(session, trials, verified)
    ranked = rank_session(session, verified, record)
    advised = {r.trial for r in ranked}  # a trial passed over, then verified without #1's slowing recipe
    rejected = [r for r in rejected + verified.rejections + passed_over if r.trial not in advised]
    return _result(session, trials, ranked, rejected, verified)


def _result(session: Session, trials: list[search.TrialResult], ranked: list[Recommendation],
            rejected: list[Rejection], verified: Verified) -> SessionResult:
    facts, reference, envelope = session.facts, session.reference, session.measured_envelope()
    baseline_runs = verified.baseline_runs or [reference.base_run]  # its verification rounds', else its one run
    baseline_run = reference.base_run if reference.base_run.ok else reference.uncapped or facts.evidence.full
    return SessionResult(
        config=session.config, evidence=facts.evidence, diagnoses=session.diagnoses, context=facts.context,
        chosen=facts.chosen, skipped=facts.skipped, baseline=facts.baseline,
        baseline_samples_per_s=baseline_run.samples_per_s,
        baseline_breakdown_ms=step_breakdown(verified.baseline_runs or [facts.evidence.full]),
        trials=trials, recommendations=ranked, rejected=rejected,
        started=session.started, finished=time.time(), memory_fix=reference.memory_fix,
        baseline_peak_mb=baseline_run.peak_memory_mb, numerics_reference=reference.note,
        numerics_envelope=envelope.summary() if envelope else {},
        baseline_latency_ms=latency_of(baseline_runs),
        baseline_load_curve=load_curve_of(baseline_runs),
        baseline_epoch=epoch_of(baseline_runs),
        baseline_page_faults_per_step=page_faults_of(baseline_runs),
        first_verified_s=verified.first_s,
        loader_model=loader_verdicts(facts.loader, trials, ranked, baseline_run.samples_per_s),
    )


def loader_verdicts(loader: dict, trials: list[search.TrialResult], ranked: list[Recommendation],
                    baseline_rate: float) -> dict:
    """The loader model's predictions beside what was measured: its own plan's trial, and the
    verified #1 (its speedup over the baseline's rate). {} where there was no prediction."""
    if not loader:
        return {}
    costs = loading.LoaderCosts(**loader["costs"])
    said = loader["prediction"]
    prediction = loading.Prediction(said["plan"], said["samples_per_s"], said["bound"])
    verdicts: dict = {"costs": loader["costs"], "predicted": prediction.to_dict()}
    tried = next((t for t in trials if t.measurement.ok and loading.same_loader(t.plan, prediction.plan)), None)
    if tried is not None:
        verdicts["model_plan"] = {**loading.judged(prediction, tried.measurement.samples_per_s), "trial": tried.number}
    top = next((r for r in ranked if r.verified), None)
    if top is not None:
        verdicts["verified_top"] = {**loading.judged(loading.predicted_for(costs, top.plan), top.speedup * baseline_rate),
                                    "rank": top.rank}
    return verdicts
