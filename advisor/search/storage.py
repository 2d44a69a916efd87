"""Where the study lives and how it is made: a journal file next to the config, or a database
(PostgreSQL lets workers on many machines share it); the study created atomically with the
baseline enqueued first, found again, or removed.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Optional, Sequence

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from advisor.addresses import with_driver
from advisor.config import AdvisorConfig
from advisor.harness.lifetime import owner
from advisor.plan import unique
from advisor.recipes.base import Param
from advisor.search import heartbeat
from advisor.search.heartbeat import fail_stale_trials, quiet_heartbeat, requeue_interrupted
from advisor.search.records import SPACE_ATTR
from advisor.search.space import space_to_json, trial_budget


def storage_url(config: AdvisorConfig) -> str:
    """Where the study lives: the configured URL, or a journal file next to the config."""
    return config.search.storage or str(config.root / f"{config.name}.optuna-journal")


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """A journal file, or a database (postgresql://..., sqlite:///..., mysql://...) whose running
    trials beat a heartbeat: one whose process died (a machine went down, kill -9) is failed by
    Optuna after its grace period and run again (RetryHeartbeatStaleTrialCallback)."""
    if "://" not in url:
        check_journal(Path(url))
        return JournalStorage(JournalFileBackend(url))
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    with quiet_heartbeat():
        return RDBStorage(with_driver(url), heartbeat_interval=int(max(1, heartbeat.HEARTBEAT_S)),
                          grace_period=int(heartbeat.STALE_AFTER_S),
                          heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=heartbeat.RETRIES))


def check_journal(path: Path) -> None:
    """Raises ValueError unless the journal file, where there is one, holds JSON records, a line
    each; its last may be cut short (a process killed as it wrote), which Optuna skips. Optuna
    itself would also skip a damaged last line and append after it, burying the damage."""
    if not path.exists():
        return
    lines = path.read_bytes().decode("utf-8").split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if number == len(lines) and line.lstrip().startswith("{"):
                continue  # a record cut short: its writer died
            raise ValueError(f"line {number} is not a JSON record") from None
        if not isinstance(record, dict) or "op_code" not in record:
            raise ValueError(f"line {number} is not an Optuna journal record")


def find_study(config: AdvisorConfig, worker: bool = False) -> Optional[optuna.Study]:
    """The workload's study if it exists (interrupted trials enqueued again), else None;
    `worker`: a process joining it, which samples with its own seed."""
    url = storage_url(config)
    if "://" not in url and not Path(url).exists():  # opening a journal file creates it: none is none
        return None
    try:
        study = optuna.load_study(study_name=config.name, storage=open_storage(url), sampler=make_sampler(config, worker))
    except KeyError:
        return None
    except (ValueError, OSError) as exc:  # a journal file that is not one (JSONDecodeError is a ValueError)
        if "://" in url:
            raise
        from advisor.errors import UserError

        raise UserError(f"search.storage: the study file {url} cannot be read ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:200] if str(exc) else 'no detail'}); run with --fresh to start "
                        "the study afresh (its trials are lost), or move the file away") from None
    fail_stale_trials(study)
    requeue_interrupted(study)
    return study


def create_study(
    config: AdvisorConfig, space: dict[str, Param], baseline_params: dict, attrs: dict, first: Sequence[dict] = (),
    claimed: Optional[optuna.Study] = None,
) -> optuna.Study:
    """Creates the workload's study: the session's facts stored in it, the baseline enqueued first
    and the `first` plans (earlier best plans, textbook settings) right after it, as many as the
    trial budget takes; no plan is queued twice (plans are compared by `plan_key`: what they do). A space whose every plan fits
    the budget is not sampled: `run_trials` queues its plans one at a time (`next_grid_plan`).

    Creation is atomic in every Optuna storage, so of several processes starting at once exactly
    one creates the study and enqueues the baseline; the others load it. `claimed`: the study, made
    empty and held by the session before it diagnosed (`session.claim`), filled now.
    """
    storage = open_storage(storage_url(config))
    try:
        study = claimed or optuna.create_study(
            study_name=config.name, storage=storage, sampler=make_sampler(config), direction="maximize"
        )
    except optuna.exceptions.DuplicatedStudyError:
        return find_study(config)
    queue = [baseline_params] + [{**baseline_params, **{k: v for k, v in p.items() if k in space}} for p in first]
    for params in unique(queue)[:trial_budget(config, space)]:  # no plan left waiting past the budget
        study.enqueue_trial(params)
    # The facts last, the space last of all: a process that joins (it waits for the space) finds
    # the baseline already queued, so trial 0 is the baseline whoever asks first.
    for key, value in {**attrs, SPACE_ATTR: space_to_json(space)}.items():
        study.set_user_attr(key, value)
    return study


def random_study(baseline_params: dict, seed: int = 0) -> optuna.Study:
    """An in-memory study that samples the space uniformly, the baseline first: random search,
    the alternative the benchmark suite holds advisor's own search against."""
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed))
    study.enqueue_trial(baseline_params)
    return study


def make_sampler(config: AdvisorConfig, worker: bool = False) -> optuna.samplers.BaseSampler:
    """TPE, seeded by the config for the session's own process and by the process for a worker
    (workers sharing one seed propose the same plans); constant_liar makes each process treat
    the trials under way elsewhere as bad, so concurrent processes spread out."""
    startup = min(10, max(3, config.search.trials // 3))
    seed = config.measure.seed if not worker else zlib.crc32(f"{config.measure.seed}:{owner()}".encode())
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)


def remove_study(config: AdvisorConfig) -> None:
    """Deletes the workload's study (for `--fresh`)."""
    url = storage_url(config)
    if "://" not in url:  # a journal file holds one study: removing the file removes it, damaged or not
        Path(url).unlink(missing_ok=True)
        return
    try:
        optuna.delete_study(study_name=config.name, storage=open_storage(url))
    except KeyError:
        pass
