"""The parent side of a measurement: start the child, watch it, read its result."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Union

from advisor.errors import WorkloadInvalid
from advisor.failures import PRUNED, hung, out_of_disk
from advisor.harness import cgroups, kept, launch, lifetime, templates
from advisor.measure import Measurement, ResourceSampler, TreeMemory, default_memory_limit_mb, kill_tree

if TYPE_CHECKING:
    from advisor.config import AdvisorConfig

STDERR_TAIL_CHARS = 4000
WATCH_EVERY_S = 0.05  # how often a watched run's progress is read
THREAD_START_FAILED = "can't start new thread"  # Python's words when pthread_create fails


def run_measurement(
    config: "AdvisorConfig", plan: dict, mode: str, steps: int, timeout_s: float,
    memory_limit_mb: Optional[float] = None,
    output_path: Optional[Path] = None,
    fresh: Union[bool, str] = False,
    watch: Optional[Callable[[dict], str]] = None,
    epoch_end_s: Optional[float] = None,
) -> Measurement:
    """Runs one measurement of `config` in a child forked from the template process, or (`fresh`) a new interpreter
    ("ahead": started before it; "template": a child of the round's own template, `advisor.harness.templates`), or
    ("kept") the plan's whose turn it is. `memory_limit_mb`, the user's budget, is a hard limit: the child's tree is
    killed past it (without one, at 90% of the machine's memory), and its data segment may not grow by more
    (`RLIMIT_DATA`). `watch` hears the timed window's progress as it goes ({"steps", "of", "samples", "seconds"});
    when it gives a reason, the run is stopped there and reported as pruned, with that reason.
    `epoch_end_s`: what an epoch's end costs the plan, timed by its earlier runs (training: charged, not timed again).

    Raises:
        WorkloadInvalid: the workload does not satisfy the contract (bad callable, wrong dataset).
    """
    if getattr(config.workload, "distributed", None) is not None:  # its ranks, on every node
        from advisor.harness.ranks import run_ranks

        return run_ranks(config, plan, mode, steps, timeout_s, memory_limit_mb)
    with lifetime.measurement_slot(), tempfile.TemporaryDirectory(prefix=lifetime.run_folder_prefix()) as folder:
        spec_path, result_path, log_path, progress_path = (
            Path(folder) / name for name in ("spec.json", "result.json", "child.log", "progress.json"))
        limit_mb = memory_limit_mb or default_memory_limit_mb()
        group = cgroups.child_group(memory_limit_mb) if memory_limit_mb is not None else None
        config_path, config_bytes = _config_for_child(config)
        spec_path.write_text(json.dumps({
            "config": str(config_path), "plan": plan, "mode": mode, "steps": steps, "memory_limit_mb": limit_mb,
            "output": str(output_path) if output_path else None, "cgroup": str(group) if group else None,
            "scratch": folder, "observer": os.getpid(), "sandbox": sandboxed(config), "compile_cache": compile_cache(config),
            "progress": str(progress_path) if watch else None, "epoch_end_s": epoch_end_s}))
        started = time.perf_counter()
        key, child = _started(plan, mode, fresh, (str(spec_path), str(result_path), str(log_path)), config_bytes, config,
                              alone=group is None and watch is None, budget=memory_limit_mb is not None)
        timed_out = True
        try:  # in a cgroup the kernel enforces the budget; the sampler only guards the machine
            with ResourceSampler(child.pid, None if group else limit_mb, budget=group is None and memory_limit_mb is not None) as sampler:
                timed_out, pruned = (not child.wait(timeout_s), "") if key else _wait(child, timeout_s, watch, progress_path)
        finally:  # an interrupt, too, must not leave the child and its workers running
            cgroup_peak, cgroup_killed = _kept_ended(key, child, timed_out, result_path) if key else _ended(child, group)
        wall_s = time.perf_counter() - started
        result = read_result(result_path)
        log_tail = log_path.read_text(errors="replace")[-STDERR_TAIL_CHARS:] if log_path.exists() else ""
        full = disk_full(folder) if result is None else ""

    if result and result["status"] == "invalid":
        raise WorkloadInvalid(result["reason"])
    if result and result.get("memory_end"):  # the child's own reading, workers alive: may pass the limit
        sampler.observe(TreeMemory.from_dict(result["memory_end"]))
    memory = with_template_pages(sampler.memory.to_dict(), child)
    if group:
        memory.update(peak_mb=cgroup_peak, method=cgroups.METHOD)
    common = {"wall_s": wall_s, "peak_memory_mb": memory["peak_mb"], "memory_source": memory["method"], "memory": memory}
    why = (stopped_reason(timed_out, timeout_s, pruned, sampler.killed_reason, cgroup_killed, cgroup_peak, memory_limit_mb)
           or failure_of(result, full or _death_reason(child.exitcode or 0, log_tail), memory_limit_mb))
    if why:
        return Measurement.failed(mode, plan, why, **common)
    fields = dict(result)
    window = fields.pop("window", None)
    fields.pop("memory_end", None)
    fields["memory"] = memory
    if fields.get("memory_source") != "cuda max allocated":
        fields.update(peak_memory_mb=memory["peak_mb"], memory_source=memory["method"])
    fields["gpu"] = sampler.gpu_summary(tuple(window) if window else None)
    return Measurement.from_dict({**fields, "mode": mode, "plan": plan, "wall_s": wall_s})


def with_template_pages(memory: dict, child) -> dict:
    """A run forked from its round's template (`templates.TemplateRun`) does not map the pages of torch's
    libraries that the imports touched, which a new interpreter holds from its start: their size, read
    from the template at the fork, is added to the readings, so the peak reads as a new interpreter's
    would (a little over: the run maps a few of them itself)."""
    extra = getattr(child, "template_mb", 0.0)
    if not extra:
        return memory
    shifted = {key: memory[key] + extra for key in ("peak_mb", "pss_mb", "hwm_mb", "rss_sum_mb")}
    return {**memory, **shifted, "template_mb": extra}


UNSANDBOXED = "ADVISOR_UNSANDBOXED"  # set by `--unsandboxed`: a script runs under the interpreter's hooks alone


def sandboxed(config) -> bool:
    """Whether a run goes into a copy of the machine: a script's, unless the user chose to run
    it without one (`--unsandboxed`)."""
    return config.workload.SANDBOXED and not os.environ.get(UNSANDBOXED)


def compile_cache(config) -> Optional[str]:
    """Where a script's runs keep torch.compile's cache: a folder of the session's, which each run
    (in its copy of the machine, too) reads and writes, so a plan compiles once a session rather
    than once a run (on a small GPT here: 18 s cold, 2 s warm), as a user's own runs after the
    first find torch's cache warm. None for the other kinds, whose runs share the machine's cache."""
    return lifetime.session_folder("compile-cache") if config.workload.SANDBOXED else None


def read_result(path: Path) -> Optional[dict]:
    """The child's result; None where it wrote none, or could not finish writing it (a full disk)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


DISK_ROOM_BYTES = 1 << 20  # less free than this where the run kept its files: its disk filled up


def disk_full(folder: str) -> str:
    """Why a run left no result, where its folder's file system is full; "" otherwise. A script's
    copy of the machine keeps every write of the run there."""
    try:
        stats = os.statvfs(folder)
    except OSError:
        return ""
    if stats.f_bavail * stats.f_frsize >= DISK_ROOM_BYTES:
        return ""
    return out_of_disk(Path(folder).parent)


def _config_for_child(config: "AdvisorConfig") -> tuple[Path, bytes]:
    """The config travels by value (a Python API config may hold callables defined in a notebook
    or script), pickled with cloudpickle, in the child's start-up arguments: never through a
    file, which another process could replace."""
    import cloudpickle

    return config.path, cloudpickle.dumps(config)


def _wait(child, timeout_s: float, watch: Optional[Callable[[dict], str]] = None,
          progress: Optional[Path] = None) -> tuple[bool, str]:
    """Waits for the child: (whether it was killed at the time limit, why `watch` pruned it or "")."""
    deadline = time.monotonic() + timeout_s
    while watch is not None and child.exitcode is None and time.monotonic() < deadline:
        child.join(WATCH_EVERY_S)
        reason = watch(json.loads(progress.read_text())) if child.exitcode is None and progress.exists() else ""
        if reason:
            kill_tree(child.pid)
            return False, reason
    child.join(max(0.0, deadline - time.monotonic()))
    if child.exitcode is not None:
        return False, ""
    kill_tree(child.pid)
    return True, ""


def _started(plan: dict, mode: str, fresh: Union[bool, str], paths: tuple[str, str, str], config: bytes,
             workload_config: "AdvisorConfig", alone: bool, budget: bool):
    """The run started, and the key of the kept interpreters it went to: the one whose turn it is, where `fresh`
    says "kept"; else (key None) a child of the round's template where it says "template", or a new child, one
    started ahead where it says "ahead" (or "template" and no template could take it). Only a run `alone`
    goes to any of those: not one held to a cgroup (every page it touches, imports too, is charged there) or watched
    as it goes; and a `script`'s never to a kept one (its modules and globals would stay imported from the run
    before) or a template (each of its runs enters its own copy of the machine first), nor one kept to a `budget`
    to a template (the budget is judged on the run's own pages, which a new interpreter holds all of). A script's
    (`workload_config`'s kind) interpreter started ahead, `sandbox`ed, entered its copy's namespaces before its imports."""
    script, sandbox = workload_config.workload.SANDBOXED, sandboxed(workload_config)
    if alone and not script and fresh == "kept":
        key = kept_key(plan, mode)
        interpreter = kept.interpreter_for(key)
        interpreter.start(*paths, config)
        return key, interpreter
    if alone and not script and not budget and fresh == "template":
        run = templates.start((*paths, config), json.dumps(kept_key(plan, mode)))
        if run is not None:
            return None, run
    return None, launch.start(*paths, fresh=bool(fresh), config=config, ahead=alone and fresh in ("ahead", "template"),
                              sandboxed=sandbox)


def kept_key(plan: dict, mode: str) -> tuple[str, str]:
    """Which kept interpreters serve a run: its plan's, in its mode."""
    return json.dumps(plan, sort_keys=True, default=str), mode


def _kept_ended(key: tuple, interpreter: "kept.KeptInterpreter", timed_out: bool, result_path: Path) -> tuple[float, bool]:
    """A kept interpreter's run is over: the interpreter ends where the run hung or left no
    result, or a process behind (its plan's next run starts a new one); else it waits for its turn."""
    if timed_out or not result_path.exists() or interpreter.exitcode is not None or kept.left_behind(interpreter.pid):
        kept.retire(key, interpreter)
    return 0.0, False


def _ended(child, group: Optional[Path]) -> tuple[float, bool]:
    """The child and everything it started killed; its cgroup's peak and whether the kernel killed
    it there, the group removed."""
    kill_tree(child.pid)
    child.join()
    reading = cgroups.reading(group) if group else (0.0, False)
    if group:
        cgroups.remove(group)
    return reading


def stopped_reason(timed_out: bool, timeout_s: float, pruned: str, killed: str, cgroup_killed: bool,
                   cgroup_peak: float, memory_limit_mb: Optional[float]) -> str:
    """Why the run was stopped before it ended (the time limit, the pruner, the memory sampler,
    the kernel at the cgroup's limit), in that order; "" when it was not."""
    if timed_out:
        return hung(timeout_s)
    if pruned:
        return f"{PRUNED}: {pruned}"
    if killed:
        return killed
    if cgroup_killed:
        return (f"over the memory budget: the kernel killed it at memory.max ({memory_limit_mb:,.0f} MB), "
                f"peak {cgroup_peak:,.0f} MB")
    return ""


def failure_of(result: Optional[dict], unfinished: str, memory_limit_mb: Optional[float]) -> str:
    """Why the child's run failed, by its result (`unfinished`: why, where it wrote none); "" when it did not."""
    if result is None:
        return unfinished
    return budget_reason(result["reason"], memory_limit_mb) if result["status"] == "failed" else ""


def budget_reason(reason: str, memory_limit_mb: Optional[float]) -> str:
    """A failed run's reason, read against the budget: under it, RLIMIT_DATA (set to the budget)
    fails allocations, and a thread whose stack cannot be mapped fails to start (seen: an
    over-budget pandas read raised "can't start new thread" in one run, MemoryError in another)."""
    if memory_limit_mb is None:
        return reason
    if reason.startswith("out of memory"):
        return f"over the memory budget: an allocation failed ({reason})"
    if THREAD_START_FAILED in reason:
        return f"over the memory budget: an allocation failed (a thread's stack: {reason.removeprefix('crashed: ')})"
    return reason


def _death_reason(returncode: int, log_tail: str) -> str:
    if returncode == -9:
        return "killed by SIGKILL (often the kernel's out-of-memory killer)"
    if returncode < 0:
        return f"killed by signal {-returncode}"
    last = [line for line in log_tail.strip().splitlines() if line.strip()]
    return f"crashed: exit status {returncode}" + (f": {last[-1][:300]}" if last else "")
