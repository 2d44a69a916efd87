"""The Optuna study: one trial = one plan measured in a fresh child. The only module importing optuna.

The study lives in storage named by `search.storage` (a PostgreSQL URL lets workers on many
machines share it) or, by default, in a journal file next to the config, which several
processes on one machine (or on a shared file system) can use at once. The baseline plan is
enqueued when the study is created, so it is always trial 0. Crashes, hangs and plans over the
memory budget are recorded as infeasible through Optuna's constraints, so the sampler learns
to avoid them. An interrupted trial is enqueued again on the next run; finished ones never are.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import threading
import time
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from advisor.config import AdvisorConfig
from advisor.failures import pruned
from advisor.harness.lifetime import interrupts_held, owner, owner_gone
from advisor.measure import Measurement
from advisor.plan import plan_key, unique
from advisor.recipes import Choice, IntRange, Param

optuna.logging.set_verbosity(optuna.logging.WARNING)

MEASUREMENT_ATTR = "measurement"
PLAN_ATTR = "plan"
CONSTRAINT = "infeasible"  # Optuna constraint: > 0 means infeasible, and TPE learns to avoid it
INTERRUPTED_ATTR = "interrupted"
REQUEUED_ATTR = "requeued_trials"
SPACE_ATTR = "space"
WORKER_ATTR = "worker"  # machine:pid of the process that ran the trial (lifetime.owner)
HEARTBEAT_ATTR = "heartbeat"  # when the running trial's process last said it was alive
HEARTBEAT_S = float(os.environ.get("ADVISOR_HEARTBEAT_S") or 30.0)
STALE_AFTER_S = 4 * HEARTBEAT_S  # a running trial silent this long belongs to a process that is gone, on any host
NAMELESS_AFTER_S = HEARTBEAT_S  # a trial is named as its process's at once; one still nameless this long was killed in between
RETRIES = 2  # times a trial whose process died is run again (databases: Optuna's RetryHeartbeatStaleTrialCallback)
PRUNE_SHARE = 0.7  # a trial that cannot end above 70% of the best trial's rate (the best over 1.4x faster: past a trial's noise) ...
PRUNE_FROM_PERCENT = 20  # ... judged from this share of its timed window, where what it can reach reads 0.82 of its final rate at worst ...
PRUNE_EARLY = (10, 0.63)  # ... and from 10% under 63%: there it reads 0.74 at worst (plans whose many workers ramp up), and
                          # 0.63 / 0.74 = 0.70 / 0.82 = 0.85: either bar stops only trials that end under 0.85 of the best
                          # (`python -m experiments.prune_trace replay`) ...
PRUNE_READINGS = 2  # ... and this many readings of its running rate (one stretch alone was once a slow step) ...
PRUNE_STRETCH_PERCENT = 5  # ... its pace read over stretches of at least this share of its window (not one step a warm queue served)
WINDOW_ATTR = "window"  # a watched trial's timed window: {"of": its steps, "best_case": whether its values are already bounds}
UNRUN_ATTR = "unrun_s"  # a pruned trial's timed window left unrun, in seconds at its pace so far: the time pruning saved
POSTGRES_DRIVERS = (("psycopg", "postgresql+psycopg"), ("psycopg2", "postgresql+psycopg2"), ("pg8000", "postgresql+pg8000"))

Progress = Callable[[str], None]
Measure = Callable[[dict], Measurement]


@dataclass(frozen=True)
class TrialResult:
    """A finished trial, as the rest of advisor sees it."""

    number: int
    plan: dict
    measurement: Measurement
    feasible: bool

    @property
    def samples_per_s(self) -> float:
        return self.measurement.samples_per_s if self.feasible else 0.0


class BehindTheBest(optuna.pruners.BasePruner):
    """Prunes a trial that cannot end above its bar (`prune_bar`) of the best feasible finished
    trial's rate even if the rest of its timed window ran at the fastest pace any stretch of it has
    run so far (`reachable`): so far behind that its last steps cannot plausibly make it the winner."""

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        window = trial.user_attrs.get(WINDOW_ATTR)
        best = best_rate(study)
        return bool(window and trial.intermediate_values and best is not None
                    and reachable(trial.intermediate_values, window) < prune_bar(trial.intermediate_values, window) * best)


def prune_bar(values: dict[int, float], window: dict) -> float:
    """The share of the best trial's rate under which a trial is stopped, at the point of its
    window its values have reached: lower early, where what it can reach is least certain. A bound
    a run reports itself (a service's best p95) is as certain early as late."""
    late = window["best_case"] or max(values) >= PRUNE_FROM_PERCENT / 100 * window["of"]
    return PRUNE_SHARE if late else PRUNE_EARLY[1]


def reachable(values: dict[int, float], window: dict) -> float:
    """The most a trial can still end at, from its intermediate values by steps of its window
    (`values`: step -> value); infinite while it is too early to tell.

    A rate over the window (samples/s) is bounded here: the steps to come, run at the fastest pace
    of any stretch of it so far (`fastest_pace`). A queue that workers filled during warm-up, or a
    cost paid once early in the window, make that pace kinder, never harsher. A run that bounds
    its own objective (a service's p95, from latencies only it holds) reports that bound: it is
    taken as it stands."""
    of, steps = window["of"], max(values)
    if window["best_case"]:
        return values[steps]
    if len(values) < PRUNE_READINGS or steps < PRUNE_EARLY[0] / 100 * of:
        return math.inf
    # (steps, seconds so far over samples per step: a scale that cancels out of the bound)
    elapsed = [(step, step / rate) for step, rate in sorted(values.items()) if rate > 0]
    pace = fastest_pace([(0, 0.0)] + elapsed, PRUNE_STRETCH_PERCENT / 100 * of)
    return of / (elapsed[-1][1] + (of - steps) / pace) if pace else math.inf


def fastest_pace(elapsed: list[tuple[float, float]], stretch: float) -> float:
    """The fastest steps per unit of time over a stretch from one reading to the first at least
    `stretch` steps after it (`elapsed`: (steps, time) in order, from (0, 0)); 0 if there is none."""
    paces = []
    for i, (s1, t1) in enumerate(elapsed):
        end = next(((s2, t2) for s2, t2 in elapsed[i + 1:] if s2 - s1 >= stretch), None)
        if end and end[1] > t1:
            paces.append((end[0] - s1) / (end[1] - t1))
    return max(paces, default=0.0)


def best_rate(study: optuna.Study) -> Optional[float]:
    values = [t.value for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
              if is_feasible_trial(t) and t.value is not None]
    return max(values, default=None)


def watcher(trial: optuna.Trial) -> Callable[[dict], str]:
    """Reports a run's progress to its trial as intermediate values, by steps of the timed window
    (requests answered, for a service): its samples/s so far, or the best 1000 / p95 ms a service
    can still end at; says why to stop it when the study's pruner prunes it."""

    heard: dict[int, float] = {}

    def watch(progress: dict) -> str:
        steps, of = progress.get("steps") or 0, progress.get("of")
        if not progress.get("seconds") or not of or steps <= max(heard, default=0):
            return ""
        window = {"of": of, "best_case": "best" in progress}
        if not heard:
            trial.set_user_attr(WINDOW_ATTR, window)
        heard[steps] = progress.get("best") or progress["samples"] / progress["seconds"]
        trial.report(heard[steps], steps)
        if not trial.should_prune():
            return ""
        trial.set_user_attr(UNRUN_ATTR, unrun_seconds(progress))
        done = f"after {100 * steps / of:.0f}% of its window"
        told = (f"1000 / p95 ms at most {heard[steps]:,.0f} by its end ({done}, the rest answered at once)"
                if window["best_case"] else
                f"{heard[steps]:,.0f}/s {done}, at most {reachable(heard, window):,.0f}/s by its end at its fastest pace so far")
        return f"{told}: under {prune_bar(heard, window):.0%} of the best trial's {best_rate(trial.study):,.0f}"

    return watch


def unrun_seconds(progress: dict) -> float:
    """The rest of a run's timed window at its pace so far: what stopping it now saves."""
    return progress["seconds"] * (progress["of"] - progress["steps"]) / progress["steps"]


def storage_url(config: AdvisorConfig) -> str:
    """Where the study lives: the configured URL, or a journal file next to the config."""
    return config.search.storage or str(config.root / f"{config.name}.optuna-journal")


def check_storage(config: AdvisorConfig) -> None:
    """One line, before anything is measured or written, when the study's storage cannot work."""
    from advisor.errors import UserError

    url = config.search.storage
    if not url:
        return
    url = with_driver(url)
    hint = ("use postgresql://user:password@host/db (its driver installed), sqlite:///path/to/study.db, a journal "
            "file path, or leave search.storage unset for a journal file next to the config")
    if "://" not in url:
        if not Path(url).parent.is_dir():
            raise UserError(f"search.storage: the folder of the journal file {url} does not exist; create it, or {hint}")
        return
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    try:
        make_url(url).get_dialect().import_dbapi()
    except Exception as exc:
        raise UserError(f"search.storage: cannot use {url!r} ({type(exc).__name__}: {exc}); {hint}") from None
    engine = create_engine(url, connect_args={"connect_timeout": 10} if url.startswith("postgresql") else {})
    try:
        engine.connect().close()
    except Exception as exc:  # the driver's own error, first line: refused, unknown host, bad password
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise UserError(f"search.storage: cannot connect to {url!r} ({first}); start the database or fix the URL") from None
    finally:
        engine.dispose()


def with_driver(url: str) -> str:
    """A plain postgresql:// URL with the PostgreSQL driver that is installed (SQLAlchemy's
    default may not be); any other URL as it is."""
    if not url.startswith("postgresql://"):
        return url
    import importlib.util

    for module, scheme in POSTGRES_DRIVERS:
        if importlib.util.find_spec(module) is not None:
            return scheme + url[len("postgresql"):]
    return url  # check_storage names the missing driver


@contextlib.contextmanager
def quiet_heartbeat():
    """Optuna marks its heartbeat experimental and expects it under Study.optimize; advisor asks
    and tells, and beats the heartbeat itself (`heartbeat`): those notices say nothing to a user."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
        yield


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """A journal file, or a database (postgresql://..., sqlite:///..., mysql://...) whose running
    trials beat a heartbeat: one whose process died (a machine went down, kill -9) is failed by
    Optuna after its grace period and run again (RetryHeartbeatStaleTrialCallback)."""
    if "://" not in url:
        check_journal(Path(url))
        return JournalStorage(JournalFileBackend(url))
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    with quiet_heartbeat():
        return RDBStorage(with_driver(url), heartbeat_interval=int(max(1, HEARTBEAT_S)), grace_period=int(STALE_AFTER_S),
                          heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=RETRIES))


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


def space_to_json(space: dict[str, Param]) -> dict:
    return {
        key: {"int": [p.low, p.high, p.log]} if isinstance(p, IntRange) else {"choice": list(p.options)}
        for key, p in space.items()
    }


def space_from_json(data: dict) -> dict[str, Param]:
    return {
        key: IntRange(*spec["int"]) if "int" in spec else Choice(tuple(spec["choice"])) for key, spec in data.items()
    }


def make_sampler(config: AdvisorConfig, worker: bool = False) -> optuna.samplers.BaseSampler:
    """TPE, seeded by the config for the session's own process and by the process for a worker
    (workers sharing one seed propose the same plans); constant_liar makes each process treat
    the trials under way elsewhere as bad, so concurrent processes spread out."""
    startup = min(10, max(3, config.search.trials // 3))
    seed = config.measure.seed if not worker else zlib.crc32(f"{config.measure.seed}:{owner()}".encode())
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)


def values_of(param: Param) -> list:
    return list(range(param.low, param.high + 1)) if isinstance(param, IntRange) else list(param.options)


def space_size(space: dict[str, Param]) -> int:
    return math.prod(len(values_of(param)) for param in space.values())


def every_plan(space: dict[str, Param]) -> list[dict]:
    """All parameter combinations, for a space small enough to measure whole."""
    keys = list(space)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(values_of(space[k]) for k in keys))]


ENUMERABLE = 4096  # spaces up to this size are enumerated to count their distinct plans


def distinct_plans(space: dict[str, Param]) -> int:
    """How many plans of the space differ in what they do (plans that differ only in keys that
    do nothing, such as Dask partitions without Dask, count once); spaces too large to
    enumerate are counted by their size."""
    size = space_size(space)
    return len(unique(every_plan(space))) if size <= ENUMERABLE else size


def next_grid_plan(study: optuna.Study, space: dict[str, Param], baseline: dict) -> Optional[dict]:
    """The first plan of the whole space, in `every_plan`'s order, that no trial has measured, is
    measuring or has queued; None when every one has. Queued one at a time, when the queue is
    empty, so the plans a policy queues (the helpful singles stacked, a plateau's neighbours) run
    before the rest of the grid, not after it."""
    done = taken_plans(study, baseline)
    return next((params for params in every_plan(space) if plan_key({**baseline, **params}) not in done), None)


def has_waiting(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def trial_budget(config: AdvisorConfig, space: dict[str, Param]) -> int:
    """No more trials than there are distinct plans."""
    return min(config.search.trials, distinct_plans(space))


def is_feasible_trial(trial: FrozenTrial) -> bool:
    return all(value <= 0 for value in trial.constraints.values())


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


def taken_plans(study: optuna.Study, baseline: dict) -> set[str]:
    """The identities of the plans measured, being measured or queued in the study."""
    def plan(t: FrozenTrial) -> dict:
        return t.user_attrs.get(PLAN_ATTR) or {**baseline, **t.system_attrs.get("fixed_params", {})}

    return {plan_key(plan(t))
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING,
                                                              TrialState.PRUNED, TrialState.WAITING))
            if counts(t) or t.state == TrialState.WAITING}


def neighbours(params: dict, space: dict[str, Param]) -> list[dict]:
    """The plans one step from `params`: one knob moved to an adjacent value (an integer by one,
    or by a factor of two on a log range), or a choice swapped for another of its options."""
    steps = []
    for key, param in space.items():
        value = params[key]
        if isinstance(param, IntRange):
            moves = (value // 2, value * 2) if param.log else (value - 1, value + 1)
            moves = [v for v in moves if param.low <= v <= param.high and v != value]
        else:
            moves = [option for option in param.options if option != value]
        steps += [{**params, key: move} for move in moves]
    return steps


def unmeasured_neighbour(study: optuna.Study, space: dict[str, Param], baseline: dict, params: dict) -> Optional[dict]:
    """The first plan one step from `params` that does something new: none measured, being
    measured or queued does the same."""
    done = taken_plans(study, baseline) | {plan_key({**baseline, **params})}
    return next((step for step in neighbours(params, space)
                 if plan_key({**baseline, **step}) not in done), None)


def suggest(trial: optuna.Trial, space: dict[str, Param]) -> dict:
    params = {}
    for key, param in space.items():
        if isinstance(param, IntRange):
            params[key] = trial.suggest_int(key, param.low, param.high, log=param.log)
        elif isinstance(param, Choice):
            params[key] = trial.suggest_categorical(key, list(param.options))
        else:
            raise TypeError(f"unknown parameter kind for {key}: {param!r}")
    return params


COUNTED_STATES = (TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING, TrialState.PRUNED)
SKIPPED_ATTR = "skipped"  # why a trial was not run: over the budget (a race), or a plan already measured
MAX_REPEATS = 10  # plans in a row the sampler proposes that were measured already: the space is spent


def mark_interrupted(study: optuna.Study, trial: optuna.Trial) -> None:
    """Fails a trial stopped by an interrupt, marked to be run again (one already told stays as told)."""
    try:
        trial.set_user_attr(INTERRUPTED_ATTR, True)
        study.tell(trial, state=TrialState.FAIL)
    except RuntimeError:  # it was finished (skipped) before the interrupt came
        pass


def retried(study: optuna.Study) -> set[int]:
    """The trials Optuna's heartbeat failed and enqueued again (each retry takes its place)."""
    return {number for t in study.get_trials(deepcopy=False) for number in t.system_attrs.get("retry_history", [])}


def counts(trial: FrozenTrial, retried_numbers: frozenset = frozenset()) -> bool:
    """Whether a trial counts against the budget: finished or under way, neither interrupted nor
    failed with its process and retried (it is run again), nor skipped."""
    return (trial.state in COUNTED_STATES and not trial.user_attrs.get(INTERRUPTED_ATTR)
            and not trial.user_attrs.get(SKIPPED_ATTR) and trial.number not in retried_numbers)


def counted_trials(study: optuna.Study) -> int:
    again = frozenset(retried(study))
    return sum(1 for t in study.get_trials(deepcopy=False, states=COUNTED_STATES) if counts(t, again))


def unmeasured_plan(study: optuna.Study, space: dict[str, Param], baseline: dict,
                    seed: int, draws: int = 200) -> Optional[dict]:
    """Parameters drawn at random (seeded) whose plan no trial has measured or is measuring;
    None when `draws` draws find none (the space is nearly spent)."""
    import random

    done = taken_plans(study, baseline)
    rng = random.Random(seed)
    for _ in range(draws):
        params = {key: rng.choice(values_of(param)) for key, param in space.items()}
        if plan_key({**baseline, **params}) not in done:
            return params
    return None


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
) -> int:
    """Asks, measures and tells until the trial budget or the deadline is reached, or until
    `stop_reason` gives one; `on_trial` hears of each finished trial (number, plan, measurement
    dict, feasible, start, end). For a plan `prune` accepts, `measure` takes a `watch` (`watcher`):
    a trial clearly losing midway is stopped and told PRUNED (`BehindTheBest`); it counts as a trial.

    Returns the number of trials this process ran. Several processes may run this on one
    study at once; each trial is asked once, so none is lost, and no plan equal in effect
    (`plan_key`) to one measured or under way is run again: the budget counts distinct plans.
    Before it returns, it waits for the trials other processes are measuring, so the caller
    concludes on every finished measurement, and runs again any whose process died.
    """
    ran = repeats = 0
    trial_seconds = 0.0  # time spent in trials (not in a verification `on_trial` ran between them)
    study.pruner = BehindTheBest()
    whole_space = distinct_plans(space) <= budget_trials  # every distinct plan fits: no sampling
    while time.time() < deadline:
        recover_stale_trials(study)
        if counted_trials(study) >= budget_trials:
            if not running_trials(study):
                break
            wait_for_trials_under_way(study, deadline, progress)  # one may die and be queued again
            continue
        if whole_space and not has_waiting(study) and (params := next_grid_plan(study, space, baseline)):
            study.enqueue_trial(params)
        trial = None
        try:  # from the moment it exists: a trial left RUNNING by an interrupt would hold a place in the budget
            with quiet_heartbeat(), interrupts_held():  # created and named as ours in one step
                trial = study.ask()
                trial.set_user_attr(WORKER_ATTR, owner())
            plan = {**baseline, **suggest(trial, space)}
            trial.set_user_attr(PLAN_ATTR, plan)
            why = skip_reason(study, trial.number, plan, budget_trials)
            if why:
                trial.set_user_attr(SKIPPED_ATTR, why)
                study.tell(trial, state=TrialState.FAIL)
                repeats = repeats + 1 if why.startswith("a plan") else 0
                fresh = unmeasured_plan(study, space, baseline, seed=trial.number) if repeats else None
                if fresh is not None:  # the sampler circles a measured plan: the next trial is one it has not tried
                    study.enqueue_trial(fresh, skip_if_exists=True)
                if repeats >= MAX_REPEATS:
                    progress(f"  the sampler proposed {MAX_REPEATS} plans in a row that were measured already: "
                             "the search stops here")
                    break
                continue
            repeats = 0
            started = time.time()
            with heartbeat(study, trial):
                run = measure(plan, watch=watcher(trial)) if prune(plan) else measure(plan)
        except KeyboardInterrupt:
            if trial is not None:
                mark_interrupted(study, trial)
            raise
        feasible = is_feasible(run, max_memory_mb)
        trial.set_user_attr(MEASUREMENT_ATTR, run.to_dict())
        if pruned(run):
            study.tell(trial, state=TrialState.PRUNED)
        else:
            trial.set_constraint(CONSTRAINT, 0.0 if feasible else 1.0)
            study.tell(trial, run.samples_per_s if run.ok else 0.0)
        ran += 1
        trial_seconds += time.time() - started
        eta = eta_seconds(trial_seconds, ran, counted_trials(study), budget_trials, deadline)
        progress(describe_trial(study, trial.number, plan, run, feasible, budget_trials, baseline, eta))
        on_trial(trial.number, plan, run.to_dict(), feasible, started, time.time())
        why_stop = stop_reason(study)
        if why_stop:
            progress(f"  {why_stop}")
            wait_for_trials_under_way(study, deadline, progress)
            break
    return ran


@contextlib.contextmanager
def heartbeat(study: optuna.Study, trial: optuna.Trial):
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


def is_feasible(run: Measurement, max_memory_mb: Optional[float]) -> bool:
    return run.ok and (max_memory_mb is None or run.peak_memory_mb <= max_memory_mb)


def infeasible_reason(run: Measurement, max_memory_mb: Optional[float]) -> str:
    if not run.ok:
        return run.reason
    if max_memory_mb is not None and run.peak_memory_mb > max_memory_mb:
        return f"over the memory budget: peak {run.peak_memory_mb:,.0f} MB > {max_memory_mb:,.0f} MB"
    return ""


def pruned_trials(study: optuna.Study) -> tuple[tuple[int, dict, str, float], ...]:
    """The trials stopped midway, clearly losing: (number, plan, why, seconds of window left unrun)."""
    return tuple((t.number, t.user_attrs.get(PLAN_ATTR, {}), t.user_attrs.get(MEASUREMENT_ATTR, {}).get("reason", ""),
                  t.user_attrs.get(UNRUN_ATTR, 0.0))
                 for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)))


RECORDED_ATTR = "recorded"  # a trial measured outside the search, and where


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


def describe_trial(
    study: optuna.Study, number: int, plan: dict, run: Measurement, feasible: bool, budget: int, baseline: dict,
    eta_s: Optional[float] = None,
) -> str:
    changes = ", ".join(f"{k}={v}" for k, v in plan.items() if v != baseline.get(k)) or "baseline"
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
