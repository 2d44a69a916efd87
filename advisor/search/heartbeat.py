"""Whose trial is whose, and which are alive: each running trial is named as its process's and
beats while it runs; one whose process is gone (kill -9, a machine down) is failed and run again.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
from typing import Optional

import optuna
from optuna.trial import FrozenTrial, TrialState

from advisor.evidence import Progress
from advisor.harness.lifetime import owner_gone
from advisor.search.records import HEARTBEAT_ATTR, INTERRUPTED_ATTR, REQUEUED_ATTR, WORKER_ATTR

HEARTBEAT_S = float(os.environ.get("ADVISOR_HEARTBEAT_S") or 30.0)
STALE_AFTER_S = 4 * HEARTBEAT_S  # a running trial silent this long belongs to a process that is gone, on any host
NAMELESS_AFTER_S = HEARTBEAT_S  # a trial is named as its process's at once; one still nameless this long was killed in between
RETRIES = 2  # times a trial whose process died is run again (databases: Optuna's RetryHeartbeatStaleTrialCallback)


@contextlib.contextmanager
def quiet_heartbeat():
    """Optuna marks its heartbeat experimental and expects it under Study.optimize; advisor asks
    and tells, and beats the heartbeat itself (`heartbeat`): those notices say nothing to a user."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
        yield


def beats(storage) -> bool:
    """Whether the storage keeps Optuna's heartbeat of running trials (databases opened here)."""
    return hasattr(storage, "record_heartbeat") and storage.get_heartbeat_interval() is not None


def recover_stale_trials(study: optuna.Study) -> None:
    """Trials of processes that died are failed and run again: by Optuna's heartbeat on a
    database (any host, after its grace period), by advisor's check on this host (at once)."""
    optuna_beats = beats(study._storage)
    if optuna_beats:
        with quiet_heartbeat():
            optuna.storages.fail_stale_trials(study)
    if fail_stale_trials(study, only_gone=optuna_beats):  # a journal: advisor's own heartbeat judges other hosts
        requeue_interrupted(study)


def running_trials(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


def wait_for_trials_under_way(study: optuna.Study, deadline: float, progress: Progress, poll_s: float = 1.0) -> None:
    """Waits, until the deadline, for the trials other processes are measuring now to finish,
    so that no finished measurement is left out of the conclusion. A trial whose process died
    is failed meanwhile (at once on this machine, after the heartbeat's grace period from
    another) and queued again, taking its place back in the budget."""
    waiting = {t.number for t in running_trials(study)}
    if waiting:
        owners = sorted({t.user_attrs.get(WORKER_ATTR, "?") for t in running_trials(study)})
        progress(f"  waiting for {len(waiting)} trial{'s' * (len(waiting) > 1)} under way in other processes "
                 f"({', '.join(owners)})")
    while waiting & {t.number for t in running_trials(study)} and time.time() < deadline:
        time.sleep(poll_s)
        recover_stale_trials(study)


def fail_stale_trials(study: optuna.Study, now: Optional[float] = None, only_gone: bool = False) -> list[int]:
    """Fails the trials left RUNNING by a process that is gone, marked interrupted so they are
    run again and not counted against the budget: on this host, a process that no longer
    exists (killed with SIGKILL, say); on any host, one whose heartbeat stopped STALE_AFTER_S
    ago (a machine that went down), or one never named as any process's (killed between its
    creation and its naming: SIGKILL cannot be held). Trials of live processes are left to their owners."""
    now = time.time() if now is None else now
    stale = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        silent = now - float(trial.user_attrs.get(HEARTBEAT_ATTR, now)) > STALE_AFTER_S and not only_gone
        nameless = WORKER_ATTR not in trial.user_attrs and now - trial.datetime_start.timestamp() > NAMELESS_AFTER_S
        if owner_gone(trial.user_attrs.get(WORKER_ATTR, "")) or silent or nameless:
            optuna.trial.Trial(study, trial._trial_id).set_user_attr(INTERRUPTED_ATTR, True)
            study.tell(trial.number, state=TrialState.FAIL)
            stale.append(trial.number)
    return stale


def retried(study: optuna.Study) -> set[int]:
    """The trials Optuna's heartbeat failed and enqueued again (each retry takes its place)."""
    return {number for t in study.get_trials(deepcopy=False) for number in t.system_attrs.get("retry_history", [])}


@contextlib.contextmanager
def beating(study: optuna.Study, trial: optuna.Trial):
    """Records every HEARTBEAT_S, while the trial measures, that its process is alive."""
    stop = threading.Event()

    storage = study._storage
    optuna_beat = beats(storage)

    def beat() -> None:
        while True:
            storage.set_trial_user_attr(trial._trial_id, HEARTBEAT_ATTR, time.time())
            if optuna_beat:
                storage.record_heartbeat(trial._trial_id)
            if stop.wait(HEARTBEAT_S):
                return

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def requeue_interrupted(study: optuna.Study) -> None:
    """Enqueues again the trials an interrupt cut short, once each (those it stopped before they
    had a plan are only failed: there is nothing of theirs to run)."""
    done = set(study.user_attrs.get(REQUEUED_ATTR, []))
    interrupted = [
        t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(INTERRUPTED_ATTR) and t.number not in done
    ]
    for trial in interrupted:
        if trial.params:
            study.enqueue_trial(trial.params)
    if interrupted:
        study.set_user_attr(REQUEUED_ATTR, sorted(done | {t.number for t in interrupted}))
