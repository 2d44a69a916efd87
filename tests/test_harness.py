"""The real harness in real child processes: failures are data, the parent carries on."""

import json
import os
import signal
import time

import pytest
from conftest import ROOT, run_cli

from advisor.harness import run_measurement
from advisor.harness.runner import budget_reason
from advisor.kinds import baseline_plan, load_config
from advisor.measure import MEMORY_METHOD
from advisor.plan import with_changes

pytestmark = pytest.mark.integration


def measure(path, mode="full", steps=4, timeout_s=60, **kwargs):
    config = load_config(path)
    return run_measurement(config, baseline_plan(config), mode, steps, timeout_s, **kwargs)


def test_full_run_measures_everything(tiny_config):
    run = measure(tiny_config())
    assert run.ok, run.reason
    assert run.samples == 4 * 8 and run.samples_per_s > 0
    assert 0 < run.step_ms_p50 <= run.step_ms_p95
    assert 0 <= run.data_wait_share <= 1
    assert run.peak_memory_mb > 50 and run.memory_source == MEMORY_METHOD
    assert run.peak_memory_mb == max(run.memory["pss_mb"], run.memory["hwm_mb"])
    assert 0 < run.cpu_util <= 1
    assert len(run.losses) == 4
    assert run.gpu["available"] is False and run.gpu["note"].startswith("no GPU")


def test_worker_pages_are_counted_once(tiny_config):
    """Forked DataLoader workers share the trainer's pages: the peak counts them once (PSS), far
    below the sum of the processes' RSS, and never below the trainer's own high-water mark."""
    without = measure(tiny_config())
    with_workers = measure(tiny_config(workload={"dataloader": {"num_workers": 4}}))
    assert with_workers.ok, with_workers.reason
    memory = with_workers.memory
    assert memory["rss_sum_mb"] > 3 * without.peak_memory_mb, "the summed RSS counts each worker's shared pages"
    assert with_workers.peak_memory_mb < 0.5 * memory["rss_sum_mb"]
    assert with_workers.peak_memory_mb >= 0.9 * without.peak_memory_mb


def test_a_burst_between_samples_is_caught(tiny_config):
    """400 MB held for a few ms, once: the kernel's high-water mark keeps it."""
    quiet = measure(tiny_config())
    burst = measure(tiny_config(workload={"model": "broken:bursting_model", "model_args": {"megabytes": 400}}))
    assert burst.ok, burst.reason
    assert burst.peak_memory_mb > quiet.peak_memory_mb + 350


def test_differential_modes(tiny_config):
    path = tiny_config()
    synthetic, cached = measure(path, "synthetic"), measure(path, "cached")
    assert synthetic.ok and synthetic.data_wait_share < 0.05
    assert cached.ok and cached.sample_probe["samples"] == 64 and cached.sample_probe["wall_ms"] > 0


def test_profile_run_lists_operators(tiny_config):
    run = measure(tiny_config(), "profile", steps=2)
    assert run.ok
    ops = run.operators
    assert ops["ops_per_step"] > 0 and ops["top"]
    assert all(op["name"].startswith("aten::") for op in ops["top"])


def test_crash_is_a_failed_measurement(tiny_config):
    run = measure(tiny_config(workload={"model": "broken:crashing_model"}))
    assert not run.ok
    assert run.reason.startswith("crashed: RuntimeError: shape mismatch planted")
    assert "broken.py" in run.reason


def test_out_of_memory_is_a_failed_measurement(tiny_config):
    run = measure(tiny_config(workload={"model": "broken:oom_model"}))
    assert not run.ok and run.reason.startswith("out of memory"), run.reason


def test_growing_memory_is_killed_at_the_budget(tiny_config):
    run = measure(tiny_config(workload={"model": "broken:growing_model"}), memory_limit_mb=900)
    assert not run.ok
    assert run.reason.startswith("over the memory budget: killed at the limit"), run.reason
    assert 900 < run.peak_memory_mb < 2000
    assert measure(tiny_config(), memory_limit_mb=900).ok, "the parent carries on"


def test_an_allocation_past_the_budget_fails_inside_the_job(tiny_config):
    """One 4 GB allocation, faster than any sampler: the data-segment limit makes it fail in the
    child as an allocation error, before the kernel's OOM killer would pick a process."""
    run = measure(tiny_config(workload={"model": "broken:allocating_model"}), memory_limit_mb=600)
    assert not run.ok
    assert run.reason.startswith("over the memory budget: an allocation failed"), run.reason
    assert run.peak_memory_mb < 600


def test_a_thread_that_cannot_start_under_the_budget_is_an_allocation_past_it(tiny_config):
    """Under the budget, a thread whose stack cannot be mapped is the budget's failure, as a
    failed allocation is (a baseline that failed so read as a crash left advisor without its
    memory fix); without a budget it stays a crash."""
    capped = measure(tiny_config(workload={"model": "broken:thread_starting_model"}), memory_limit_mb=600)
    assert not capped.ok
    assert capped.reason.startswith("over the memory budget: an allocation failed (a thread's stack:"), capped.reason
    assert budget_reason("crashed: RuntimeError: can't start new thread (at threading.py:964)", None).startswith("crashed")


def test_hang_is_killed_at_the_time_limit(tiny_config):
    path = tiny_config(workload={"dataset_args": {"hang_after": 20}, "dataloader": {"num_workers": 1}})
    started = time.perf_counter()
    run = measure(path, timeout_s=4)
    assert not run.ok and run.reason.startswith("hung"), run.reason
    assert time.perf_counter() - started < 30


def test_a_run_ends_with_its_result_though_the_job_left_a_thread_running(tiny_config):
    """A job that leaves a non-daemon thread behind: the run ends once its result is written,
    where the interpreter's own end would wait on the thread until the run was killed as hung."""
    path = tiny_config(workload={"model": "broken:model_with_a_lingering_thread"})
    config = load_config(path)
    for fresh in (False, True):
        run = run_measurement(config, baseline_plan(config), "full", 3, 30, fresh=fresh)
        assert run.ok, run.reason


def test_plan_changes_reach_the_child(tiny_config):
    config = load_config(tiny_config())
    plan = with_changes(baseline_plan(config), batch_size=4)
    run = run_measurement(config, plan, "full", 3, 60)
    assert run.ok and run.samples == 12


def test_parent_carries_on_after_a_crash(tiny_config):
    """diagnose on a crashing job still runs every measurement and reports the failure."""
    result = run_cli("diagnose", str(tiny_config(workload={"model": "broken:crashing_model"})), "--json")
    assert result.returncode == 4, result.stderr  # the baseline itself failed: the README's exit status 4
    assert "advisor: the baseline itself failed (crashed: " in result.stderr and "Traceback" not in result.stderr
    payload = json.loads(result.stdout)
    runs = payload["evidence"]["runs"]
    assert set(runs) == {"full", "synthetic", "cached", "profile"}
    assert runs["full"]["status"] == "failed" and "shape mismatch" in runs["full"]["reason"]
    assert "[4/4]" in result.stderr, "progress was shown for every run"


def test_a_busy_machine_is_noticed(tiny_config, tmp_path):
    """Two processes spinning beside the run take most of the 2-core machine: the measurement
    records that share, which a quiet run does not reach. The window lasts about 0.7 s (1.5 ms
    per sample): a window under BUSY_MIN_WINDOW_S reads 0, too short for /proc/stat's ticks."""
    import subprocess
    import sys

    (tmp_path / "latency.txt").write_text("1.5")
    path = tiny_config(workload={"dataset": "broken:file_latency_dataset", "dataset_args": {"n": 4096}})
    quiet = measure(path, steps=60)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.5)
        busy = measure(path, steps=60)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert busy.ok and quiet.ok
    print(f"other processes' share: quiet {quiet.other_cpu_share:.0%}, busy {busy.other_cpu_share:.0%}")
    assert busy.other_cpu_share >= 0.25 and busy.other_cpu_share > quiet.other_cpu_share + 0.2


def test_a_diagnosis_run_on_a_busy_machine_is_taken_again_once_it_is_quiet(tiny_config, tmp_path):
    """Two processes spin through the diagnosis's first run and stop when it reports: that run
    read busy, so it is taken again on the quiet machine, and the evidence keeps the quiet one
    (a busy machine's shares named compute where a quiet one named the loader). The later runs,
    quiet, are taken once."""
    import subprocess
    import sys

    from advisor.diagnosis import collect_evidence
    from advisor.measure import BUSY_SHARE

    (tmp_path / "latency.txt").write_text("1.5")
    path = tiny_config(workload={"dataset": "broken:file_latency_dataset", "dataset_args": {"n": 4096}},
                       measure={"steps": 60, "profile_steps": 2})
    hogs: list[subprocess.Popen] = []
    lines: list[str] = []

    def hog_the_first_run(line: str) -> None:
        lines.append(line)
        if line.startswith("[1/") and not hogs:
            hogs.extend(subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2))
        elif line.startswith("      ") and hogs:
            for hog in hogs:
                hog.kill()

    try:
        evidence = collect_evidence(load_config(path), hog_the_first_run)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    said = "\n".join(lines)
    assert hogs, said
    first = lines.index(next(line for line in lines if line.startswith("[1/")))
    assert "other processes took" in lines[first + 1] and "measured again once the machine is quiet" in lines[first + 2], said
    assert evidence.full.ok and evidence.full.other_cpu_share < BUSY_SHARE, said
    assert said.count("measured again") == 1, said


def _hold_a_slot(log, seconds):
    from advisor.harness.lifetime import measurement_slot

    with measurement_slot():
        with open(log, "a") as handle:
            handle.write(f"in {time.time()}\n")
        time.sleep(seconds)
        with open(log, "a") as handle:
            handle.write(f"out {time.time()}\n")


def _events(log) -> list[str]:
    lines = [line.split() for line in open(log).read().splitlines()]
    return [kind for kind, _ in sorted(lines, key=lambda line: float(line[1]))]


def test_one_slot_makes_processes_take_turns_and_a_killed_holder_frees_it(monkeypatch, tmp_path):
    """--slots 1: two processes measuring at once take turns; a holder killed with -9 leaves
    the slot free (the kernel drops its file lock)."""
    import multiprocessing

    monkeypatch.setenv("ADVISOR_SLOTS", "1")
    context, log = multiprocessing.get_context("fork"), tmp_path / "events"
    pair = [context.Process(target=_hold_a_slot, args=(log, 0.4)) for _ in range(2)]
    for process in pair:
        process.start()
    for process in pair:
        process.join(30)
    assert _events(log) == ["in", "out", "in", "out"]
    stuck = context.Process(target=_hold_a_slot, args=(log, 60))
    stuck.start()
    deadline = time.time() + 10
    while len(_events(log)) < 5 and time.time() < deadline:
        time.sleep(0.05)
    os.kill(stuck.pid, signal.SIGKILL)
    stuck.join(10)
    after = context.Process(target=_hold_a_slot, args=(log, 0.0))
    after.start()
    after.join(10)
    assert after.exitcode == 0 and _events(log)[-2:] == ["in", "out"], _events(log)


def test_persistent_workers_see_the_same_batches_in_every_epoch(tiny_config):
    """A window three epochs long (16 samples, batches of 8, 6 steps): the loader's workers draw
    their seed once per iterator, which persistent workers keep across epochs. The order of the
    samples must not depend on it, or the numerics gate rejects an exact fix."""
    from advisor.session.gate import compare_outputs

    shards = ROOT / "experiments" / "workloads" / "shards.py"
    config = load_config(tiny_config(workload={
        "model": f"{shards}:build_model", "dataset": f"{shards}:build_dataset",
        "dataset_args": {"n": 16, "latency_ms": 0.0, "open_ms": 0.0}}))
    base_plan = baseline_plan(config)
    plans = [base_plan, with_changes(base_plan, dataloader__num_workers=1),
             with_changes(base_plan, dataloader__num_workers=1, dataloader__persistent_workers=True)]
    base, fresh_workers, persistent = (run_measurement(config, plan, "full", 6, 60) for plan in plans)
    assert len(base.losses) == 6 and len(set(base.losses)) > 2
    for run in (fresh_workers, persistent):
        assert run.losses == base.losses
        assert compare_outputs(run, base, "exact", config).passed


def test_the_sampler_reads_a_trees_pss_only_where_its_summed_rss_cannot_rule_out_the_limit():
    """PSS costs the watched processes (the kernel walks their page tables under their map's
    lock): under a far limit only the cheap readings are taken. Two processes sharing 70 MB
    (a worker forked from its parent) sum over 140 MB of RSS: under a 100 MB limit only their PSS
    (each page counted once) tells that they are within it, so it is read, and they live."""
    import subprocess
    import sys

    from advisor.measure import ResourceSampler

    sharing = ("import os, time\nx = bytearray(70 * 2**20)\nfor i in range(0, len(x), 4096): x[i] = 1\n"
               "os.fork()\ntime.sleep(4)")
    for limit_mb in (100_000.0, 100.0):
        child = subprocess.Popen([sys.executable, "-c", sharing], start_new_session=True)
        try:
            with ResourceSampler(child.pid, limit_mb, interval_s=0.05) as sampler:
                time.sleep(1)
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        assert sampler.memory.rss_sum_mb > 140 and sampler.memory.hwm_mb < 100 and not sampler.killed_reason, sampler.memory
        if limit_mb > 1000:
            assert sampler.memory.pss_mb == 0, "nothing but the cheap readings under a far limit"
        else:
            assert 70 < sampler.memory.pss_mb < 100, sampler.memory


def test_page_faults_a_step_show_memory_handed_back_and_the_allocator_recipe_ending_it(tiny_config):
    """A step that maps a 48 MB buffer afresh faults its 12,288 pages in every step; under the
    allocator recipe's fixed thresholds the buffer stays in the heap, and only a step whose
    buffer no longer fits the hole it left (a small block placed there meanwhile) faults anew:
    0-2 of 16 steps measured here, 3 of 8 in CI, by the heap's history: the bound is a quarter."""
    path = tiny_config(workload={"model": "broken:hands_back"}, measure={"warmup_steps": 3})
    config = load_config(path)
    default = run_measurement(config, baseline_plan(config), "full", 16, 60)
    kept = run_measurement(config, with_changes(baseline_plan(config), allocator__keep_mb=256), "full", 16, 60)
    assert default.ok and kept.ok, (default.reason, kept.reason)
    assert default.page_faults_per_step > 12_000, default.page_faults_per_step
    assert kept.page_faults_per_step < default.page_faults_per_step / 4, kept.page_faults_per_step
    from advisor.evidence import Evidence
    from advisor.kinds.train.body import training_body
    from advisor.measure import Measurement
    from advisor.tracking import run_metrics

    said = "\n".join(training_body(Evidence(full=default, profile=Measurement("profile", {}, "failed")), []))
    assert f"page faults {default.page_faults_per_step:,.0f} a step (4" in said, said  # 48 MB of 4 KB pages
    assert run_metrics(default.to_dict())["page_faults_per_step"] == default.page_faults_per_step


def test_an_allocator_fix_shows_the_page_faults_its_gain_rests_on():
    from advisor.measure import Measurement, page_faults_of
    from advisor.report import render_recommendations

    def run(faults, status="ok"):
        return Measurement(mode="full", plan={}, status=status, samples_per_s=100.0, page_faults_per_step=faults)

    assert page_faults_of([run(8000.0), run(9000.0), run(0.0), run(5.0, "failed")]) == 8500.0
    assert page_faults_of([run(0.0)]) == 0.0
    rec = {"rank": 1, "recipes": ["allocator", "compile"], "plan": {}, "changes": {"allocator.keep_mb": 1024},
           "speedup": 1.2, "interval": [1.1, 1.3], "verified": True, "reason": "verified", "numerics": {},
           "peak_memory_mb": 300.0, "snippet": "", "trial": 3, "samples_per_s": 120.0, "page_faults_per_step": 0.5}
    payload = {"baseline": {"samples_per_s": 100.0, "page_faults_per_step": 8500.0}, "unit": "samples/s",
               "recommendations": [rec], "rejected": [], "min_speedup": 1.05, "trials": [], "pruned": []}
    assert ("     page faults a step: the baseline 8,500 (33 MB handed back and mapped again each step), this plan 0: "
            "the gain rests on them; a process of yours that faults fewer gains less (count its faults around a step: "
            "resource.getrusage(resource.RUSAGE_SELF).ru_minflt)") in render_recommendations(payload)
    assert "page faults" not in render_recommendations({**payload, "recommendations": [{**rec, "recipes": ["compile"]}]})


def test_kept_interpreters_serve_a_plans_later_rounds_and_go_with_a_hang_or_the_rounds_end(tiny_config):
    """The first `DRAWS` runs of a plan each start a new interpreter; the next ones run again in
    them, in turn, and train as the first did (same seed, same steps); a run that hangs ends its
    interpreter; `close_all` leaves no process of theirs."""
    import dataclasses

    import psutil

    from advisor.harness import kept
    from advisor.harness.runner import kept_key

    config = load_config(tiny_config(workload={"dataloader": {"num_workers": 1}}))
    plan = baseline_plan(config)
    try:
        runs = [run_measurement(config, plan, "full", 3, 60, fresh="kept") for _ in range(kept.DRAWS + 2)]
        assert all(run.ok for run in runs), [run.reason for run in runs]
        assert [run.interpreter for run in runs] == ["fresh"] * kept.DRAWS + ["kept"] * 2
        assert {run.losses for run in runs} == {runs[0].losses} and {run.parameters for run in runs} == {runs[0].parameters}
        serving = [interpreter.pid for interpreter in kept._kept[kept_key(plan, "full")][0]]
        assert len(set(serving)) == kept.DRAWS and all(psutil.pid_exists(pid) for pid in serving)

        hanging = dataclasses.replace(config, workload=dataclasses.replace(
            config.workload, dataset_args={**(config.workload.dataset_args or {}), "hang_after": 1}))
        stuck = with_changes(plan, batch_size=2)
        run = run_measurement(hanging, stuck, "full", 3, 5, fresh="kept")
        assert not run.ok and run.reason.startswith("hung"), run.reason
        assert kept._kept[kept_key(stuck, "full")][0] == [None] * kept.DRAWS, "the hung interpreter is ended, not reused"
    finally:
        kept.close_all()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in serving)


def test_new_interpreters_started_ahead_each_serve_one_run_and_none_outlives_the_rounds(tiny_config):
    """A round's new interpreters start a batch at once, one a core, their imports done before
    any run begins; each serves one run (the first in its process) and ends with it; one that
    died while it waited is passed over; `close_all` ends those still waiting."""
    import psutil

    from advisor.harness import kept, launch

    config = load_config(tiny_config())
    plan = baseline_plan(config)
    batch = min(launch.READY_MOST, len(os.sched_getaffinity(0)))
    try:
        first = run_measurement(config, plan, "full", 3, 60, fresh="ahead")
        assert first.ok and first.interpreter == "fresh", first.reason
        waiting = [interpreter.process.pid for interpreter in launch._ready]
        assert len(waiting) == batch - 1 and all(psutil.pid_exists(pid) for pid in waiting)
        assert all("torch" in " ".join(m.path for m in psutil.Process(pid).memory_maps()) for pid in waiting)
        if waiting:
            os.kill(waiting[-1], signal.SIGKILL)  # the next to be taken
            launch._ready[-1].process.join(10)
        second = run_measurement(config, plan, "full", 3, 60, fresh="ahead")
        assert second.ok and second.interpreter == "fresh" and second.losses == first.losses, second.reason
        left = [interpreter.process.pid for interpreter in launch._ready]
        assert not set(left) & set(waiting[-1:]), "a dead interpreter is never handed a run"
    finally:
        kept.close_all()
    assert launch._ready == []
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in waiting + left)


def test_a_rounds_runs_fork_from_its_own_template_which_never_runs_a_plan_twice(tiny_config):
    """A round's runs are forked from one new interpreter (a batch of them starts at once, one a
    core, their imports done first); a plan seen again takes the next template, the one before
    ending; each run is the first in its process and trains as a new interpreter's does (same
    seed, same losses), its memory counting the library pages its template holds; a run that
    hangs is killed and its template serves on; a template that died while it waited is passed
    over; a run held to a budget starts a new interpreter; `close_all` leaves no template."""
    import dataclasses

    import psutil

    from advisor.harness import kept, launch, templates

    config = load_config(tiny_config())
    plan, other = baseline_plan(config), with_changes(baseline_plan(config), batch_size=2)
    try:
        fresh = run_measurement(config, plan, "full", 3, 60, fresh="ahead")
        first = run_measurement(config, plan, "full", 3, 60, fresh="template")
        assert first.ok and first.interpreter == "template" and first.losses == fresh.losses, first.reason
        assert first.memory["template_mb"] > 10 and first.peak_memory_mb >= first.memory["hwm_mb"]
        (serving,) = templates._serving
        waiting = [template.pid for template in templates._waiting]
        assert len(waiting) == min(launch.READY_MOST, len(os.sched_getaffinity(0))) - 1
        assert psutil.Process(serving.pid).children() == [], "the run ended with its result"

        hanging = dataclasses.replace(config, workload=dataclasses.replace(
            config.workload, dataset_args={**(config.workload.dataset_args or {}), "hang_after": 1}))
        stuck = run_measurement(hanging, other, "full", 3, 5, fresh="template")
        assert not stuck.ok and stuck.reason.startswith("hung"), stuck.reason
        assert templates._serving == [serving] and serving.exitcode is None, "another plan: the same round's template"

        if waiting:
            os.kill(waiting[0], signal.SIGKILL)  # the next round's, killed while it waits
            templates._waiting[0].process.join(10)
        again = run_measurement(config, plan, "full", 3, 60, fresh="template")  # a plan seen again: the next round
        assert again.ok and again.interpreter == "template" and again.losses == first.losses, again.reason
        assert serving.exitcode is not None and templates._serving[0] is not serving, "the last round's template ended"
        assert templates._serving[0].pid not in waiting[:1], "a dead template is never handed a run"

        budgeted = run_measurement(config, plan, "full", 3, 60, memory_limit_mb=4000, fresh="template")
        assert budgeted.ok and budgeted.interpreter == "fresh", "a budget is judged on a new interpreter's own pages"
        ended = [serving.pid, *(template.pid for template in templates._serving + templates._waiting)]
    finally:
        kept.close_all()
    assert templates._serving == [] and templates._waiting == []
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in ended)


@pytest.mark.integration
def test_a_services_children_import_no_compiler_stack_and_a_training_jobs_have_it_before_their_window():
    """What the fork server and each interpreter started ahead import is torch, the harness and the
    kind's own preload. A training step's optimizer imports the compiler stack (torch._dynamo, 2 s
    of a new interpreter's 4 s) at its first step, so a training kind imports it ahead; a service
    never steps an optimizer, and its rounds' interpreters would pay those 2 s each for nothing."""
    import subprocess
    import sys

    probe = ("import sys, importlib; from advisor.harness import launch; from advisor.kinds import kind_of; "
             "[importlib.import_module(m) for m in launch.preloaded(kind_of(sys.argv[1]).preload)]; "
             "print('torch._dynamo' in sys.modules)")
    said = {kind: subprocess.run([sys.executable, "-c", probe, kind], capture_output=True, text=True, timeout=120)
            for kind in ("infer", "train")}
    assert said["infer"].stdout.strip() == "False", said["infer"].stdout + said["infer"].stderr[-2000:]
    assert said["train"].stdout.strip() == "True", said["train"].stdout + said["train"].stderr[-2000:]
