"""The Optuna study with real child processes: failures as constraints, resume, two workers."""

import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter

import optuna
import pytest
from conftest import ROOT, TINY, merged, write_config

from advisor import search
from advisor.harness.lifetime import owner
from advisor.kinds import baseline_plan, load_config
from advisor.measure import Measurement
from advisor.recipes import IntRange
from advisor.session import measure_with

pytestmark = pytest.mark.integration


MEASURED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def load_study(config):
    return optuna.load_study(study_name=config.name, storage=search.open_storage(search.storage_url(config)))


def test_crash_hang_and_memory_are_infeasible_and_the_study_goes_on(tmp_path):
    path = write_config(tmp_path, merged(TINY, {
        "workload": {"dataset": "broken:trouble_dataset", "dataset_args": {"crash_with": 1, "hang_with": 2, "hog_with": 4}},
        "measure": {"timeout_s": 5},
    }))
    config = load_config(path)
    baseline = baseline_plan(config)
    space = {"dataloader.num_workers": IntRange(0, 4)}
    measure = measure_with(config)
    base_peak = measure(baseline).peak_memory_mb
    budget = base_peak + 150  # the baseline fits; 4 workers holding 150 MB each do not
    study = search.create_study(config, space, {"dataloader.num_workers": 0}, {},
                                first=[{"dataloader.num_workers": n} for n in (1, 2, 4)])
    search.run_trials(study, space, baseline, measure, 5, time.time() + 300, budget)
    results = {t.plan["dataloader.num_workers"]: t for t in search.finished_trials(study)[:4]}
    assert results[0].feasible
    assert not results[1].feasible and "planted crash" in results[1].measurement.reason
    assert not results[2].feasible and results[2].measurement.reason.startswith("hung")
    assert not results[4].feasible and results[4].measurement.ok and results[4].measurement.peak_memory_mb > budget
    frozen = {t.number: t for t in study.trials}
    assert frozen[1].constraints == {search.CONSTRAINT: 1.0}, "the sampler sees the crash as infeasible"
    assert frozen[0].constraints == {search.CONSTRAINT: 0.0}
    assert len(search.finished_trials(study)) == 5, "the study carried on after the failures"


def quick_config(tmp_path, trials, latency_ms=3.0, **changes):
    return write_config(tmp_path, merged(TINY, {
        "workload": {"dataset": "broken:trouble_dataset", "dataset_args": {"latency_ms": latency_ms}},
        "search": {"recipes": ["dataloader"], "trials": trials, "verify_top": 0},  # the search alone
        "measure": {"steps": 6},
        **changes,
    }))


STARTED: list = []  # advisor processes a test started: none outlives it, failed or not


def advisor(*args):
    process = subprocess.Popen(
        [sys.executable, "-m", "advisor.cli", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    STARTED.append(process)
    return process


@pytest.fixture(autouse=True)
def no_advisor_left_running():
    yield
    while STARTED:
        process = STARTED.pop()
        if process.poll() is None:
            process.kill()  # its measurement children die with it
            process.communicate()


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def measured_trials(config):
    """The trials that took their place in the budget and measured: finished, or pruned midway."""
    try:
        study = load_study(config)
    except KeyError:
        return []
    return study.get_trials(states=MEASURED)


def test_interrupt_then_resume_redoes_no_finished_trial(tmp_path):
    path = quick_config(tmp_path, trials=5)
    config = load_config(path)
    log = tmp_path / "first.log"
    with open(log, "w") as sink:  # the trial lines, read as they are printed (loading the study is slower than a trial)
        # SIGINT as a terminal delivers it: a suite started in the background inherits it ignored
        first = subprocess.Popen([sys.executable, "-m", "advisor.cli", "optimize", str(path)], cwd=ROOT,
                                 stdout=subprocess.DEVNULL, stderr=sink, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.time() + 240
        while "[2/5]" not in log.read_text() and time.time() < deadline and first.poll() is None:
            time.sleep(0.05)
        first.send_signal(signal.SIGINT)
        first.wait(timeout=60)
    stderr = log.read_text()
    assert first.returncode == 130, stderr
    assert "run the same command again to resume" in stderr
    before = {t.number: t.user_attrs[search.MEASUREMENT_ATTR] for t in measured_trials(config)}
    interrupted = [t for t in load_study(config).trials  # cut short with a plan (one stopped before it had one is only failed)
                   if t.user_attrs.get(search.INTERRUPTED_ATTR) and search.PLAN_ATTR in t.user_attrs]

    second = advisor("optimize", str(path))
    stdout, stderr = second.communicate(timeout=400)
    assert second.returncode == 0, stderr
    assert "resuming study" in stderr and "diagnosing" not in stderr
    after = {t.number: t.user_attrs[search.MEASUREMENT_ATTR] for t in measured_trials(config)}
    assert all(after[number] == measured for number, measured in before.items()), "finished trials kept as they were"
    counted = [t for t in load_study(config).trials if not t.user_attrs.get(search.INTERRUPTED_ATTR)]
    assert len(after) == len(counted) == 5, "the budget counts each trial once"
    for trial in interrupted:  # an interrupted trial is run again, with its own parameters
        assert any(t.params == trial.params and t.number > trial.number for t in measured_trials(config))


def test_ctrl_c_landing_in_the_journal_locks_cleanup_is_the_interrupt(tmp_path, monkeypatch):
    """Ctrl-C that lands just after Optuna's journal lock removed its file makes the lock's own
    cleanup fail (FileNotFoundError, unlinking it again): advisor reads that as the interrupt
    (exit 130, resumable), not as a crash with a traceback (exit 1, seen in a full suite run)."""
    from optuna.storages.journal import JournalFileOpenLock

    from advisor.cli import raised_by_interrupt

    lock = JournalFileOpenLock(str(tmp_path / "study.journal"))
    assert lock.acquire()
    unlink = os.unlink

    def interrupted_after(path):  # the signal handler runs right after the file is gone
        unlink(path)
        monkeypatch.setattr(os, "unlink", unlink)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "unlink", interrupted_after)
    with pytest.raises(FileNotFoundError) as raised:
        lock.release()
    assert raised_by_interrupt(raised.value)
    assert not raised_by_interrupt(FileNotFoundError("a real missing file")), "a plain error stays an error"


def test_two_workers_share_one_study(tmp_path):
    # Slow storage (15 ms a sample) keeps each trial long enough for the helper to start and join.
    path = quick_config(tmp_path, trials=8, latency_ms=15.0)
    config = load_config(path)
    leader = advisor("optimize", str(path))
    wait_for(lambda: len(measured_trials(config)) >= 1, 240, "the study to start")
    helper = advisor("worker", str(path))
    helper_out, helper_err = helper.communicate(timeout=400)
    leader_out, leader_err = leader.communicate(timeout=400)
    assert helper.returncode == 0 and leader.returncode == 0, helper_err + leader_err
    trials = load_study(config).trials
    finished = [t for t in trials if t.state in MEASURED]
    assert len(finished) == 8, "the budget is shared exactly"
    assert all(t.state in MEASURED or t.user_attrs.get(search.SKIPPED_ATTR) for t in trials), \
        "no trial lost or left running (a trial not run says why)"
    runners = Counter(t.user_attrs[search.WORKER_ATTR] for t in finished)
    assert len(runners) == 2, f"both processes ran trials: {runners}"
    fixed = Counter(str(t.system_attrs.get("fixed_params")) for t in finished if "fixed_params" in t.system_attrs)
    assert all(count == 1 for count in fixed.values()), "each enqueued plan ran exactly once"
    from advisor.plan import plan_key
    plans = Counter(plan_key(t.user_attrs[search.PLAN_ATTR]) for t in finished)
    assert all(count == 1 for count in plans.values()), f"no plan measured twice: {plans}"
    assert "worker finished: ran" in helper_out


def test_worker_without_a_study_is_a_clear_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "advisor.cli", "worker", str(quick_config(tmp_path, 4)),
                             "--wait-s", "1"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "after waiting 1 s; start it with advisor optimize" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_interrupt_is_held_until_a_trial_is_named():
    """Ctrl-C inside `ask` once left a trial RUNNING with no owner, and the resume waited on it
    for its whole time budget: the trial is now created and named in one step."""
    from advisor.harness.lifetime import interrupts_held

    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        reached = []
        with pytest.raises(KeyboardInterrupt):
            with interrupts_held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                reached.append("the end of the block")
        assert reached == ["the end of the block"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_a_trial_never_named_is_failed_after_a_heartbeat():
    """SIGKILL cannot be held: a process killed between creating a trial and naming it leaves it
    RUNNING and nameless; it is failed once it has been nameless for a heartbeat period."""
    study = optuna.create_study()
    nameless = study.ask()
    named = study.ask()
    named.set_user_attr(search.WORKER_ATTR, owner())
    now = time.time()
    assert search.fail_stale_trials(study, now) == [], "it may still be being named"
    assert search.fail_stale_trials(study, now + search.NAMELESS_AFTER_S + 1) == [nameless.number]
    assert study.trials[nameless.number].user_attrs[search.INTERRUPTED_ATTR]
    assert study.trials[named.number].state == optuna.trial.TrialState.RUNNING, "a live owner's trial is its own"


def test_stale_trials_are_failed_on_any_host_by_their_heartbeat(tmp_path):
    """A trial RUNNING on another machine whose heartbeat stopped is failed and re-queued on the
    next resume; one still beating, or run by a live local process, is left to its owner."""
    storage = search.open_storage(str(tmp_path / "study.journal"))
    study = optuna.create_study(study_name="stale", storage=storage)
    now = time.time()
    workers = {"gone": ("elsewhere:41", now - 300), "beating": ("elsewhere:42", now - 10),
               "mine": (owner(), now - 10)}
    trials = {}
    for name, (worker, beat) in workers.items():
        trial = study.ask({"x": optuna.distributions.IntDistribution(0, 9)})
        trial.set_user_attr(search.WORKER_ATTR, worker)
        trial.set_user_attr(search.HEARTBEAT_ATTR, beat)
        trials[name] = trial.number
    assert search.fail_stale_trials(study, now) == [trials["gone"]]
    states = {name: study.trials[number] for name, number in trials.items()}
    assert states["gone"].state == optuna.trial.TrialState.FAIL and states["gone"].user_attrs[search.INTERRUPTED_ATTR]
    assert states["beating"].state == states["mine"].state == optuna.trial.TrialState.RUNNING
    search.requeue_interrupted(study)
    (waiting,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert waiting.system_attrs["fixed_params"] == states["gone"].params, "queued again with its own plan"


def test_a_machine_is_its_hostname_its_boot_and_its_pid_namespace():
    """Two machines that share a hostname (cloned containers' hosts), or two containers of one host
    that share its hostname and boot, do not read each other's pids as their own: a process of
    this hostname on another boot, or in another pid namespace, is not "gone" here."""
    from advisor.harness.lifetime import machine, owner_gone

    here = machine()
    host, boot, namespace = here.split("/")
    assert host == socket.gethostname() and namespace.isdigit()
    assert not owner_gone(f"{host}/00000000/{namespace}:999999"), "another machine's process, never judged from here"
    assert not owner_gone(f"{host}/{boot}/1:999999"), "another container's process, never judged from here"
    assert owner_gone(f"{here}:999999") == (not os.path.exists("/proc/999999"))


def test_a_sampler_circling_a_measured_plan_is_given_an_unmeasured_one(tmp_path):
    """When the baseline is best, TPE keeps proposing it; each repeat enqueues a plan not yet
    measured, so the budget is spent on distinct plans instead of stopping early."""
    from advisor.measure import Measurement
    from advisor.plan import plan_key
    from advisor.recipes import Choice

    config = load_config(quick_config(tmp_path, 6))
    space = {"pipeline.dask_workers": Choice((None, 2)), "pipeline.dask_partitions": Choice((None, 16)),
             "pipeline.dask_scheduler": Choice((None, "distributed", "processes"))}
    baseline = {key: None for key in space}  # without workers the other two do nothing: 1 + 2 x 3 distinct plans
    lines = []

    def measure(plan):  # every fix loses: the sampler's favourite stays the baseline
        return Measurement(mode="full", plan=plan, status="ok", samples_per_s=50.0 if plan["pipeline.dask_workers"] else 100.0)

    study = search.create_study(config, space, baseline, {})
    search.run_trials(study, space, baseline, measure, 6, time.time() + 120, None, progress=lines.append)
    measured = {plan_key(t.plan) for t in search.finished_trials(study)}
    assert len(measured) == 6, lines
    assert not any("the search stops here" in line for line in lines)


def test_a_space_measured_whole_runs_a_plan_a_policy_queues_before_the_rest_of_the_grid(tmp_path):
    """Every plan fits the budget, so none is sampled; but the grid is queued one plan at a time,
    so a plan queued after a trial (the helpful singles stacked) runs next, not last."""
    from advisor.plan import plan_key
    from advisor.recipes import Choice

    config = load_config(quick_config(tmp_path, 8))
    space = {"a": Choice((0, 1)), "b": Choice((0, 1)), "c": Choice((0, 1))}
    baseline = {"a": 0, "b": 0, "c": 0}
    stack = {"a": 1, "b": 1, "c": 1}  # the grid's last plan

    def measure(plan):
        return Measurement(mode="full", plan=plan, status="ok", samples_per_s=100.0 + sum(plan.values()))

    def on_trial(number, *rest):
        if number == 1:
            study.enqueue_trial(stack, skip_if_exists=True)

    study = search.create_study(config, space, baseline, {})
    search.run_trials(study, space, baseline, measure, 8, time.time() + 120, None, on_trial=on_trial)
    trials = sorted(search.finished_trials(study), key=lambda t: t.number)
    assert trials[2].plan == stack, [t.plan for t in trials]
    assert len({plan_key(t.plan) for t in trials}) == len(trials) == 8, "each plan of the space once"


def test_a_dead_machines_trial_is_failed_by_optunas_heartbeat_and_retried(tmp_path, monkeypatch):
    """A database study beats Optuna's heartbeat: a running trial of a process on another
    machine that went silent is failed after the grace period and enqueued again by Optuna's
    retry callback; the budget counts the retry, not the dead attempt."""
    monkeypatch.setattr(search.heartbeat, "HEARTBEAT_S", 1.0)
    monkeypatch.setattr(search.heartbeat, "STALE_AFTER_S", 1.0)
    storage = search.open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    assert search.beats(storage)
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    dead = study.ask({"x": optuna.distributions.IntDistribution(0, 3)})
    dead.set_user_attr(search.WORKER_ATTR, "a-machine-that-went-down:4242")
    storage.record_heartbeat(dead._trial_id)
    assert search.counted_trials(study) == 1
    time.sleep(2.5)
    search.recover_stale_trials(study)
    states = {t.number: t.state for t in study.trials}
    assert states[dead.number] == optuna.trial.TrialState.FAIL
    retry = next(t for t in study.trials if t.number != dead.number)
    assert retry.state == optuna.trial.TrialState.WAITING and retry.params == dead.params
    assert search.counted_trials(study) == 0, "the dead attempt no longer holds a place in the budget"


def test_a_spent_budget_waits_for_trials_under_way_and_runs_again_one_whose_process_died(tmp_path):
    """The budget's last place is held by another process's trial: run_trials does not return
    while it runs (its result would be left out of the conclusion); when that process dies the
    trial is failed, queued again and measured here, so the budget is spent on finished trials."""
    storage = search.open_storage(str(tmp_path / "study.journal"))
    study = optuna.create_study(study_name="wait", storage=storage, direction="maximize")
    space = {"x": IntRange(0, 3)}
    measure = lambda plan: Measurement(mode="full", plan=plan, status="ok", samples_per_s=10.0)  # noqa: E731
    study.enqueue_trial({"x": 1})  # the two plans differ, so the rerun is not answered from the study
    study.enqueue_trial({"x": 2})
    done = study.ask({"x": optuna.distributions.IntDistribution(0, 3)})
    done.set_user_attr(search.PLAN_ATTR, {"x": done.params["x"]})
    done.set_user_attr(search.MEASUREMENT_ATTR, measure({"x": done.params["x"]}).to_dict())
    study.tell(done, 10.0)
    elsewhere = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    other = study.ask({"x": optuna.distributions.IntDistribution(0, 3)})
    other.set_user_attr(search.PLAN_ATTR, {"x": other.params["x"]})
    other.set_user_attr(search.WORKER_ATTR, f"{owner().rpartition(':')[0]}:{elsewhere.pid}")
    other.set_user_attr(search.HEARTBEAT_ATTR, time.time())
    killer = threading.Timer(2.0, lambda: (elsewhere.kill(), elsewhere.wait()))  # killed and reaped: gone
    killer.start()
    lines, started = [], time.time()
    ran = search.run_trials(study, space, {"x": 0}, measure, 2, time.time() + 60, None, lines.append)
    assert time.time() - started >= 2.0, "it waited for the trial under way"
    assert any("waiting for 1 trial under way" in line for line in lines), lines
    assert ran == 1 and study.trials[other.number].state == optuna.trial.TrialState.FAIL
    assert search.counted_trials(study) == 2 and not search.running_trials(study)
    assert study.trials[-1].params == other.params, "the dead process's plan was measured again here"


def running_rates(step_seconds: list[float], batch: int = 10) -> dict[int, float]:
    """A window's running rates as the watcher hears them: step -> samples so far / seconds so far."""
    rates, seconds = {}, 0.0
    for step, spent in enumerate(step_seconds, start=1):
        seconds += spent
        rates[step] = step * batch / seconds
    return rates


RATE_WINDOW = {"of": 100, "best_case": False}


def test_a_steady_loser_is_bounded_by_its_own_pace_from_a_tenth_of_its_window():
    steady = running_rates([0.02] * 100)  # 500 samples/s all the way
    assert search.reachable({s: r for s, r in steady.items() if s < 10}, RATE_WINDOW) == math.inf, "too early to tell"
    assert search.reachable({12: steady[12]}, RATE_WINDOW) == math.inf, "one reading alone"
    assert search.reachable({5: steady[5], 12: steady[12]}, RATE_WINDOW) == pytest.approx(500.0)


def test_a_cost_paid_early_in_the_window_does_not_condemn_a_trial_whose_pace_since_is_fast():
    """Recompiles, or workers still starting: its first steps are slow, its running rate low for a
    while; what it can still reach is judged on its pace since, so it is not pruned where the
    running rate alone (under 70% of a 1000/s best) would have stopped it."""
    rates = running_rates([0.1] * 3 + [0.01] * 27)  # 3 slow steps, then 1000 samples/s: it can end near 790/s
    assert rates[30] < 0.7 * 1000
    assert search.reachable(rates, RATE_WINDOW) > 0.7 * 1000


def test_one_step_served_from_a_warm_queue_does_not_set_the_pace():
    """Workers that filled their queue in warm-up serve a step at the compute's pace; the loop's
    steady pace is slower. A stretch of 5% of the window spans several steps, so the burst does not
    make a clear loser look like a winner."""
    rates = running_rates([0.05, 0.05, 0.002] + [0.05] * 17)  # 200/s, one burst of 5,000/s
    bound = search.reachable(rates, RATE_WINDOW)
    assert 200 < bound < 250, "near its steady pace, not the burst's (at 5,000/s the rest would end near 900/s)"


def test_a_bound_the_run_reported_itself_is_taken_as_it_stands():
    best_case = {"of": 100, "best_case": True}
    assert search.reachable({3: 50.0, 7: 6.0}, best_case) == 6.0


def watched_behind_a_best_of(study: optuna.Study, rate: float, count: int) -> list[optuna.Trial]:
    """A feasible trial finished at `rate`, then `count` trials under way, watched over RATE_WINDOW."""
    best = study.ask()
    best.set_user_attr(search.MEASUREMENT_ATTR, {})
    best.set_constraint(search.CONSTRAINT, 0.0)
    study.tell(best, rate)
    trials = [study.ask() for _ in range(count)]
    for trial in trials:
        trial.set_user_attr(search.WINDOW_ATTR, RATE_WINDOW)
    return trials


def test_behind_the_best_prunes_only_a_trial_that_cannot_reach_70_percent_of_the_best():
    study = optuna.create_study(direction="maximize", pruner=search.BehindTheBest())
    alone = study.ask()
    alone.set_user_attr(search.WINDOW_ATTR, RATE_WINDOW)
    for step, rate in running_rates([0.1] * 20).items():
        alone.report(rate, step)
    assert not alone.should_prune(), "no finished trial to be behind"
    slow, close = watched_behind_a_best_of(study, 1000.0, 2)
    for step, rate in running_rates([0.02] * 22).items():  # 500/s
        slow.report(rate, step)
    assert slow.should_prune(), "at 500/s it ends at 500/s: under 70% of 1000"
    for step, rate in running_rates([0.0133] * 40).items():  # 750/s
        close.report(rate, step)
    assert not close.should_prune(), "behind, but not clearly"
    unwatched = study.ask()
    unwatched.report(1.0, 90)
    assert not unwatched.should_prune(), "no window recorded: nothing to judge it by"


def test_where_the_baseline_breaks_the_memory_budget_a_plan_grazing_it_stops_no_fix_that_fits():
    """A memory fix must keep clear of the budget to be verified (`search.MEMORY_FIX_HEADROOM`);
    a faster plan that fits only just is never the fix, so a slower one with room must run to its end."""
    def study_with(baseline_peak_mb: float) -> optuna.Study:
        study = optuna.create_study(direction="maximize", pruner=search.BehindTheBest(max_memory_mb=450.0))
        for peak, ok in ((baseline_peak_mb, baseline_peak_mb <= 450), (440.0, True)):  # #0 the baseline, #1 grazing
            trial = study.ask()
            trial.set_user_attr(search.MEASUREMENT_ATTR, {"mode": "full", "plan": {}, "samples_per_s": 1000.0 if ok else 0.0,
                                                         "status": "ok" if ok else "failed",
                                                         "reason": "" if ok else "over the memory budget: killed at the limit",
                                                         "peak_memory_mb": peak})
            trial.set_constraint(search.CONSTRAINT, 0.0 if ok else 1.0)
            study.tell(trial, 1000.0 if ok else 0.0)
        return study

    for baseline_peak, pruned in ((680.0, False), (300.0, True)):
        study = study_with(baseline_peak)
        roomy = study.ask()
        roomy.set_user_attr(search.WINDOW_ATTR, RATE_WINDOW)
        for step, rate in running_rates([0.02] * 30).items():  # 500/s: half the grazing plan's rate
            roomy.report(rate, step)
        assert roomy.should_prune() is pruned, f"baseline peak {baseline_peak} MB"
    assert search.best_rate(study_with(680.0), 450.0) is None and search.best_rate(study_with(300.0), 450.0) == 1000.0


def test_early_in_its_window_a_trial_must_be_further_behind_to_be_stopped():
    """From a tenth of the window to a fifth, what a trial can reach is least certain: it is
    stopped there only under 63% of the best, past a fifth under 70%."""
    study = optuna.create_study(direction="maximize", pruner=search.BehindTheBest())
    far, near = watched_behind_a_best_of(study, 1000.0, 2)
    for step, rate in running_rates([0.02] * 12).items():  # 500/s, 12% of its window
        far.report(rate, step)
    assert far.should_prune(), "500/s cannot reach 63% of 1000"
    near_rates = running_rates([0.015] * 25)  # 667/s
    for step in range(1, 13):
        near.report(near_rates[step], step)
    assert not near.should_prune(), "667/s is over 63% of 1000: too early to stop it"
    for step in range(13, 26):
        near.report(near_rates[step], step)
    assert near.should_prune(), "past a fifth of its window, 667/s is under 70% of 1000"
    assert search.prune_bar({3: 6.0}, {"of": 100, "best_case": True}) == search.PRUNE_SHARE, \
        "a bound the run reported itself is as certain early as late"


def test_a_clearly_losing_trial_is_stopped_midway_and_counted(tmp_path):
    """Real child runs: the baseline loads with 2 DataLoader workers; the plan without them pays
    each sample's storage latency in the loop, is reported midway and pruned."""
    path = quick_config(tmp_path, 2, measure={"steps": 60}, workload={
        "dataset": "broken:trouble_dataset", "dataset_args": {"latency_ms": 4.0}, "dataloader": {"num_workers": 2}})
    config = load_config(path)
    space = {"dataloader.num_workers": IntRange(0, 2)}
    study = search.create_study(config, space, {"dataloader.num_workers": 2}, {}, first=[{"dataloader.num_workers": 0}])
    lines = []
    search.run_trials(study, space, baseline_plan(config), measure_with(config), 2, time.time() + 120, None,
                      progress=lines.append, prune=lambda plan: True)
    slow = load_study(config).trials[1]
    assert slow.state == optuna.trial.TrialState.PRUNED, lines
    window = slow.user_attrs[search.WINDOW_ATTR]
    assert not window["best_case"] and len(slow.intermediate_values) >= search.PRUNE_READINGS
    assert search.PRUNE_EARLY[0] / 100 * window["of"] <= max(slow.intermediate_values) < window["of"], \
        "judged from a tenth of its window, stopped before it ended"
    assert "pruned: " in lines[-1] and re.search(r"under (63|70)% of the best trial's", lines[-1]), lines[-1]
    steps, unrun = max(slow.intermediate_values), slow.user_attrs[search.UNRUN_ATTR]
    spent = steps * config.workload.batch_size / slow.intermediate_values[steps]  # its window so far, in seconds
    assert unrun == pytest.approx(spent * (window["of"] - steps) / steps, rel=1e-6), "the rest of its window at its pace"
    assert search.counted_trials(study) == 2 and [t.number for t in search.finished_trials(study)] == [0]


def test_a_trials_line_counts_in_the_unit_its_run_measured():
    """A script's runs count steps (advisor sees its steps, not its batches): its trial lines say
    steps/s, as its ranking does, never samples/s."""
    from advisor.measure import Measurement

    script = Measurement("full", {}, "ok", samples_per_s=21.5, environment={"unit": "steps/s"})
    builders = Measurement("full", {}, "ok", samples_per_s=1400.0)
    assert search.rate_text(script) == "22 steps/s" and search.rate_text(builders) == "1,400 samples/s"
