"""What a script workload's measurement child runs: the user's training script, unmodified, as
`python SCRIPT ARGS` runs it, under hooks that find and time its steps and apply the plan.

- A step is one backward pass of a scalar (`torch.autograd.backward`, which `Tensor.backward`
  calls): its loss is the step's loss, and the time from one backward's end to the next is the
  step's time. After the warm-up and the timed window the script is unwound (`WindowDone`, a
  BaseException its own `except Exception` does not catch); its remaining epochs never run.
- Where batches come from a DataLoader, the wait for each is timed: the input's share of a step.
  The `synthetic` run replays the first batch through the patched iterator: compute alone.
- The plan applies from outside the code: the process's settings (threads, the allocator);
  autocast from a step's first outermost module call to its backward, so the loss computed from
  the output runs under it too, as the snippet's `with torch.autocast(...)` block has it (amp);
  torch.compile of each outermost module the loss's gradients reach, in place, once they are
  known at the first backward (compile); and the worker settings of every DataLoader the script
  builds (dataloader). The evidence runs keep the script's own, noted with where the first
  loader and the first forward call are, for the snippets.
- A script that has called no backward when the run's time is nearly spent is stopped with a
  one-line error, rather than left to hang.
- The script's folder is the user's: every write under it (open, os.open, makedirs, remove,
  rename, torch.save) lands in the run's scratch folder instead, where later reads of the same
  run (open, torch.load) find it. Writes from C code other than torch's are not seen.
"""

from __future__ import annotations

import builtins
import inspect
import io
import linecache
import math
import os
import runpy
import signal
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

from advisor.config import AdvisorConfig
from advisor.errors import UserError
from advisor.harness.batches import batch_length
from advisor.harness.lifetime import die_with_parent
from advisor.harness.operators import STEP_LABEL, summarize_profile
from advisor.harness.train import PROFILE_WARMUP_STEPS, checksums_of, cpu_seconds, nudge_by_one_ulp, prepare_process
from advisor.measure import machine_busy_seconds, other_cpu_share, step_statistics
from advisor.recipes import applied, around, dataloader

NO_STEP_MARGIN_S = 10.0  # a script with no backward yet is stopped this long before the run's time limit


class WindowDone(BaseException):
    """The timed window is measured: unwinds the script from inside its backward."""


class NoStepYet(BaseException):
    """The run's time is nearly spent and the script has called no backward: unwinds it."""


class WindowTooLong(BaseException):
    """The script's steps are too slow for the timed window to end within the run's time limit:
    unwinds it at once, rather than have this run and every later one wait out the limit."""


@dataclass
class Steps:
    """The script's steps as the backward hook sees them: the end of each, its loss, and the
    DataLoader waits within it. `window_done` is called once `warmup + steps` have ended after
    the first."""

    warmup: int
    steps: int
    ends: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    waiting: float = 0.0  # DataLoader waits since the last step ended
    fetching: list = field(default_factory=lambda: [0.0, 0.0, 0])  # the window's in-process loads: wall s, CPU s, samples
    parameters: Optional[list] = None  # the tensors the loss's gradients reach, found at the first step
    checksums: list = field(default_factory=list)  # theirs at the window's end
    marks: dict = field(default_factory=dict)  # the window's "start" and "end": (wall clock, own CPU s, machine's busy s)
    on_window: Callable[[str], None] = lambda moment: None  # the timed window's "start", each "step", its "end"
    limit_s: float = math.inf  # the window must end this long after `born`
    born: float = field(default_factory=time.perf_counter)

    def ended(self, loss: float) -> None:
        self.ends.append(time.perf_counter())
        timed = len(self.ends) - self.warmup - 1  # steps ended since the window opened
        if timed < self.steps:
            self.check_fits()
        if timed > 0:  # a timed step: from the last end to this one
            self.losses.append(loss)
            self.waits.append(self.waiting)
        self.waiting = 0.0
        if timed == 0:
            self.marks["start"] = (time.time(), cpu_seconds(), machine_busy_seconds())
            self.on_window("start")
        elif timed == self.steps:
            self.marks["end"] = (time.time(), cpu_seconds(), machine_busy_seconds())
            self.on_window("end")
            self.checksums = checksums_of(self.parameters or [])
            raise WindowDone
        elif timed > 0:
            self.on_window("step")

    def check_fits(self) -> None:
        """Once two steps are timed, whether the rest can end within the limit at the faster of
        the two (a first step that compiles, or warms a cache, is not held against it)."""
        if len(self.ends) < 3:
            return
        step = min(self.ends[-1] - self.ends[-2], self.ends[-2] - self.ends[-3])
        remaining = self.warmup + self.steps + 1 - len(self.ends)
        if self.ends[-1] + step * remaining - self.born > self.limit_s:
            setup = self.ends[0] - self.born
            raise WindowTooLong(step, setup + step * (self.warmup + self.steps))

    def loaded(self, wall: float, cpu: float, samples: int) -> None:
        """A batch the main process loaded itself (no workers) within the window: its wall and CPU time."""
        if len(self.ends) > self.warmup:
            self.fetching = [self.fetching[0] + wall, self.fetching[1] + cpu, self.fetching[2] + samples]

    def sample_probe(self) -> dict:
        """Per sample: the wall and CPU time of loading it, where the main process loads (the
        fetch/prep split: time off the CPU is waiting on storage)."""
        wall, cpu, samples = self.fetching
        return {"wall_ms": 1000 * wall / samples, "cpu_ms": 1000 * cpu / samples} if samples else {}

    def step_seconds(self) -> list[float]:
        timed = self.ends[self.warmup:]
        return [later - earlier for earlier, later in zip(timed, timed[1:])]

    def warmup_ms(self) -> list[float]:
        """The warm-up's steps after the first (which holds the script's own start-up), in ms:
        where a plan's one-off cost lands (compile's, in place after the first backward, in the
        second step), for `Recipe.one_off_cost`."""
        warm = self.ends[:self.warmup + 1]
        return [1000 * (later - earlier) for earlier, later in zip(warm, warm[1:])]


def run(config: AdvisorConfig, plan: dict, mode: str, steps: int, scratch: str, in_copy: bool = False) -> dict:
    """Runs the script until its timed window is measured; returns the measurement fields.
    `in_copy`: the run is in a copy of the machine (`advisor.harness.sandbox`), whose layers say
    what it wrote; else the interpreter's hooks keep its writes under its folder aside."""
    workload = config.workload
    script = (config.root / workload.script).resolve()
    device, default_threads = prepare_process(config, plan)
    warmup = PROFILE_WARMUP_STEPS if mode == "profile" else config.measure.warmup_steps
    record = Steps(warmup, steps, limit_s=max(1.0, config.measure.timeout_s - NO_STEP_MARGIN_S))
    profiler = Profiled() if mode == "profile" else None
    if profiler is not None:
        record.on_window = profiler.on_window
    writes: list[str] = []
    seen: dict = {}  # the script's first DataLoader's own settings, and where its calls are
    printed = LastLine(sys.stdout)
    started = time.perf_counter()
    with ExitStack() as stack:
        scope = stack.enter_context(StepScope(around("around_forward", plan, device_type=device.type)))
        stack.enter_context(steps_found(record, config.measure.seed if mode == "nudged" else None, scope))
        stack.enter_context(waits_timed(record, replay=mode == "synthetic"))
        stack.enter_context(forward_wrapped(scope, compiling(plan, record, seen), config.root, seen))
        stack.enter_context(loaders_set(plan, config.root, seen))
        if not in_copy:  # only without a copy of the machine: hooks that keep the folder's writes aside
            stack.enter_context(writes_kept_in(config.root, Path(scratch) / "writes", writes))
        stack.enter_context(as_main(script, [str(arg) for arg in workload.args], config.root, printed))
        stack.enter_context(first_step_by(max(1.0, config.measure.timeout_s - NO_STEP_MARGIN_S), record))
        outcome = run_script(script, workload.script, config, warmup + steps)
    if outcome is not None or len(record.ends) < warmup + steps + 1:
        raise UserError(ended_early(workload.script, outcome, len(record.ends), warmup + steps + 1, printed.last))
    step_s = record.step_seconds()
    wall = sum(step_s)
    (started_at, cpu_start, busy_start), (ended_at, cpu_end, busy_end) = record.marks["start"], record.marks["end"]
    fields = step_statistics(step_s, record.waits, [0.0] * len(step_s), len(step_s))
    if in_copy:
        from advisor.harness.sandbox import describe
        from advisor.harness.sandbox import writes as written

        writes = [describe(entry) for entry in written(scratch)]
    environment = {"device": device.type, "default_threads": default_threads, "torch": torch.__version__,
                   "writes": sorted(set(writes)), "sandboxed": in_copy, "unit": "steps/s",
                   "ended_processes": alive_beside_me() if in_copy else [], **seen}
    fields.update(losses=record.losses, parameters=record.checksums, environment=environment, device=device.type,
                  sample_probe=record.sample_probe(),
                  setup_s=record.ends[0] - started, warmup_ms=record.warmup_ms(), window=(started_at, ended_at),
                  cpu_util=min(1.0, (cpu_end - cpu_start) / (wall * (os.cpu_count() or 1))),
                  other_cpu_share=other_cpu_share(busy_end - busy_start, cpu_end - cpu_start, wall))
    if profiler is not None:
        fields["operators"] = profiler.summary(steps, wall)
    return fields


def alive_beside_me() -> list[str]:
    """The other processes of the run's pid namespace at its window's end, by name: the script's
    DataLoader workers, helpers and children, each ended with the run (pid 1's end ends them)."""
    names = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                names.append(Path(f"/proc/{entry}/comm").read_text().strip())
            except OSError:
                continue  # ended meanwhile
    return sorted(names)


def run_script(script: Path, named: str, config: AdvisorConfig, window: int) -> Optional[str]:
    """Runs the script as __main__; None when the window ended it, else how it ended."""
    try:
        runpy.run_path(str(script), run_name="__main__")
    except WindowDone:
        return None
    except WindowTooLong as exc:
        raise UserError(too_slow_for_window(named, *exc.args, window, config.measure.timeout_s)) from None
    except NoStepYet as exc:
        raise UserError(f"workload.script: {named} called no backward of a scalar loss in {exc} s; advisor finds a "
                        "script's training steps by their loss.backward(): give it arguments that reach training "
                        "sooner, or raise measure.timeout_s") from None
    except SystemExit as exc:
        return f"exited with status {exc.code if exc.code is not None else 0}"
    except EOFError:
        raise UserError(f"{script.name} reads standard input (input() or sys.stdin), which advisor's runs do not "
                        "have; pass what it asks for as command-line arguments (workload.args)") from None
    return "ended on its own"


def too_slow_for_window(script: str, step_s: float, needed_s: float, window: int, limit_s: float) -> str:
    """What to change when the script's steps are too slow for its window: the time limit it
    needs, rounded up with room, or fewer steps."""
    enough = 60 * math.ceil((needed_s * 1.25 + NO_STEP_MARGIN_S + 30) / 60)
    return (f"workload.script: {script} takes about {step_s:.1f} s a step, so the {window} steps advisor times "
            f"(measure.warmup_steps + measure.steps) need about {needed_s:.0f} s, past measure.timeout_s "
            f"{limit_s:.0f} s: raise measure.timeout_s to {enough} or more, or lower measure.steps")


def ended_early(script: str, outcome: Optional[str], ended: int, needed: int, last_line: str) -> str:
    said = f"; its last line: {last_line[:200]!r}" if last_line else "; it printed nothing"
    found = "no training step (no backward of a scalar loss)" if ended == 0 else f"{max(ended - 1, 0)} timed step(s)"
    return (f"workload.script: {script} {outcome or 'ended'} after {found}, before the {needed - 1} advisor "
            f"measures (measure.warmup_steps + measure.steps){said}; give it arguments that train longer, "
            "or lower measure.steps")


class StepScope:
    """The plan's forward context (autocast), open from a step's first outermost module call
    until its backward: the loss computed from the model's output runs inside it too, as in the
    snippet's `with torch.autocast(...)` block around the forward and the loss. Per thread, as
    autocast's own state is."""

    def __init__(self, context: Callable[[], Any]) -> None:
        self.context, self.local = context, threading.local()

    def enter(self) -> None:
        if getattr(self.local, "open", None) is None:
            opened = ExitStack()
            opened.enter_context(self.context())
            self.local.open = opened

    def leave(self) -> None:
        opened, self.local.open = getattr(self.local, "open", None), None
        if opened is not None:
            opened.close()

    def __enter__(self) -> "StepScope":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.leave()


@contextmanager
def steps_found(record: Steps, nudge_seed: Optional[int] = None, scope: Optional[StepScope] = None) -> Iterator[None]:
    """Every backward of one scalar ends a step (`Steps.ended`), and closes the step's `scope`
    first (backward runs outside autocast, as a training loop writes it). With `nudge_seed`, the
    parameters are moved by one unit in the last place once found, before the first update
    (the `nudged` run: how far rounding alone moves this script's losses)."""
    original = torch.autograd.backward

    def backward(tensors, *args, **kwargs):
        if scope is not None:
            scope.leave()
        scalar = isinstance(tensors, torch.Tensor) and tensors.numel() == 1
        found = scalar and record.parameters is None
        if found:
            record.parameters = leaves(tensors)
        result = original(tensors, *args, **kwargs)
        if found and nudge_seed is not None:  # after the backward that saved them, before any update
            nudge_by_one_ulp(record.parameters, nudge_seed)
        if scalar:
            record.ended(float(tensors.detach()))
        return result

    torch.autograd.backward = backward
    try:
        yield
    finally:
        torch.autograd.backward = original


def leaves(loss: torch.Tensor) -> list[torch.Tensor]:
    """The tensors whose gradients the loss's backward accumulates (the trained parameters,
    whatever updates them: an optimizer, or the script's own `p.data.add_`), in graph order."""
    found, seen, stack = [], set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            found.append(variable)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return found


@contextmanager
def first_step_by(seconds: float, record: Steps) -> Iterator[None]:
    """Unwinds the script (`NoStepYet`) if no step has ended `seconds` from now."""
    def expired(signum, frame):
        if not record.ends:
            raise NoStepYet(f"{seconds:.0f}")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def loaders_set(plan: dict, root: Path, seen: dict) -> Iterator[None]:
    """Every DataLoader the script builds takes the plan's worker settings (where the plan has
    them), and its workers die with the run; the first one's own settings and call are noted
    in `seen` ("loader", "loader_call"), the baseline's and the snippet's.

    A loader made persistent draws its workers' base seed from the global RNG once, where the
    script's own drew one every epoch, which would shift the shuffle of every later epoch: it
    draws the one a fresh iterator would have, so the samples and their order stay the script's."""
    from torch.utils.data import DataLoader

    original_init, original_iter = DataLoader.__init__, DataLoader.__iter__
    signature = inspect.signature(original_init)

    def init(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        options = bound.arguments
        own = dataloader.settings_of(options)
        draws_every_epoch = not (options["persistent_workers"] and int(options["num_workers"]) > 0)
        if "loader" not in seen:
            seen.update(loader=own, loader_call=call_site(root))
        options.update(applied("loader", {}, plan, cuda=torch.cuda.is_available()))
        options["dataset"] = applied("dataset", options["dataset"], plan)
        if options["num_workers"] > 0:
            options["worker_init_fn"] = DyingWithTheRun(options["worker_init_fn"])
        else:  # torch refuses worker-only options without workers
            options.update(prefetch_factor=None, persistent_workers=False)
        original_init(*bound.args, **bound.kwargs)
        self._draws_every_epoch = draws_every_epoch

    def iterate(self):
        if getattr(self, "_draws_every_epoch", False) and self.persistent_workers and self._iterator is not None:
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)  # the seed a fresh iterator draws
        return original_iter(self)

    DataLoader.__init__, DataLoader.__iter__ = init, iterate
    try:
        yield
    finally:
        DataLoader.__init__, DataLoader.__iter__ = original_init, original_iter


class DyingWithTheRun:
    """A worker_init_fn that ties the worker's life to the run's, then calls the script's own."""

    def __init__(self, then: Optional[Callable]) -> None:
        self.then = then

    def __call__(self, worker_id: int) -> None:
        die_with_parent()
        if self.then is not None:
            self.then(worker_id)


def call_site(root: Path) -> list[str]:
    """The innermost caller in the user's own files (under `root`, outside the interpreter's
    prefix): [file:line, its source line]; empty when there is none."""
    root, prefix = str(root.resolve()), sys.prefix
    frame = sys._getframe(2)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if filename.startswith(root + os.sep) and not filename.startswith(prefix):
            code = linecache.getline(filename, frame.f_lineno).strip()
            return [f"{os.path.relpath(filename, root)}:{frame.f_lineno}", code]
        frame = frame.f_back
    return []


@contextmanager
def waits_timed(record: Steps, replay: bool = False) -> Iterator[None]:
    """Each batch a DataLoader hands over, its wait added to the step's; where the main process
    loads it, its CPU time too. With `replay`, every batch after the first is the first again."""
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    original = _BaseDataLoaderIter.__next__
    first: list = []

    def timed_next(self):
        if first:
            return first[0]
        t0, cpu0 = time.perf_counter(), time.thread_time()
        try:
            batch = original(self)
        finally:
            wall = time.perf_counter() - t0
            record.waiting += wall
        if self._num_workers == 0:
            record.loaded(wall, time.thread_time() - cpu0, batch_length(batch))
        if replay:
            first.append(batch)
        return batch

    _BaseDataLoaderIter.__next__ = timed_next
    try:
        yield
    finally:
        _BaseDataLoaderIter.__next__ = original


def compiling(plan: dict, record: Steps, seen: dict) -> Callable[[torch.nn.Module], None]:
    """What an outermost module call does first under the plan's compile: once the loss's
    parameters are known (the first backward), each outermost module holding some of them is
    compiled in place (`nn.Module.compile`), once; its class is noted in `seen` ("compiled")."""
    judged: dict[int, bool] = {}

    def compile_if_trained(module: torch.nn.Module) -> None:
        if record.parameters is None or id(module) in judged:
            return
        trained = {id(parameter) for parameter in record.parameters}
        judged[id(module)] = any(id(parameter) in trained for parameter in module.parameters())
        if judged[id(module)]:
            applied("compiled", module, plan, in_place=True)
            if getattr(module, "_compiled_call_impl", None) is not None:  # what nn.Module.compile sets
                seen.setdefault("compiled", []).append(type(module).__name__)

    return compile_if_trained


@contextmanager
def forward_wrapped(scope: StepScope, before_call: Callable[[torch.nn.Module], None], root: Path,
                    seen: dict) -> Iterator[None]:
    """Every outermost module call opens the step's `scope` (autocast) and passes through
    `before_call` (compile); nested calls, and calls torch.compile traces, run as they are. The
    first outermost call in the user's files is noted in `seen` ("forward_call")."""
    original = torch.nn.Module.__call__
    depth = threading.local()

    def call(self, *args, **kwargs):
        if torch.compiler.is_compiling() or getattr(depth, "inside", False):
            return original(self, *args, **kwargs)
        if "forward_call" not in seen:
            seen["forward_call"] = call_site(root)
        scope.enter()
        before_call(self)
        depth.inside = True
        try:
            return original(self, *args, **kwargs)
        finally:
            depth.inside = False

    torch.nn.Module.__call__ = call
    try:
        yield
    finally:
        torch.nn.Module.__call__ = original


@contextmanager
def writes_kept_in(folder: Path, scratch: Path, writes: list[str]) -> Iterator[None]:
    """Every write under `folder` goes to the same relative path under `scratch` (named in
    `writes`); a read finds the run's own copy first, else the user's file."""
    hooks = WritesKept(folder, scratch, writes)
    hooks.install()
    try:
        yield
    finally:
        hooks.restore()


class WritesKept:
    """The interpreter's file calls (open, os.open, os's path calls, torch.save and torch.load),
    each redirected under `scratch` where it writes under `folder`."""

    PATH_CALLS = ("makedirs", "mkdir", "remove", "unlink", "replace", "rename")
    WRITING_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def __init__(self, folder: Path, scratch: Path, writes: list[str]) -> None:
        self.folder, self.scratch, self.writes = folder.resolve(), scratch, writes
        self.original_open, self.original_io_open, self.original_os_open = builtins.open, io.open, os.open
        self.originals = {name: getattr(os, name) for name in self.PATH_CALLS}
        self.original_save, self.original_load = torch.save, torch.load

    def install(self) -> None:
        builtins.open = io.open = self.open
        os.open = self.os_open
        torch.save, torch.load = self.save, self.load
        for name in self.originals:
            setattr(os, name, self.path_call(name))

    def restore(self) -> None:
        builtins.open, io.open, os.open = self.original_open, self.original_io_open, self.original_os_open
        torch.save, torch.load = self.original_save, self.original_load
        for name, function in self.originals.items():
            setattr(os, name, function)

    def redirected(self, path: Any, **kwargs: Any) -> Optional[Path]:
        if not isinstance(path, (str, bytes, os.PathLike)):  # a descriptor or a file object: already open
            return None
        if any(kwargs.get(name) is not None for name in ("dir_fd", "src_dir_fd", "dst_dir_fd")):
            return None  # relative to an open folder (shutil.rmtree's walk), not to the working one
        absolute = Path(os.path.abspath(os.fsdecode(path)))
        if absolute != self.folder and self.folder not in absolute.parents:
            return None
        return self.scratch / absolute.relative_to(self.folder)

    def kept(self, copy: Path) -> Path:
        """A write's copy, named in `writes`, its folder made."""
        self.writes.append(str(copy.relative_to(self.scratch)))
        copy.parent.mkdir(parents=True, exist_ok=True)
        return copy

    def os_open(self, path, flags, *args, **kwargs):
        copy = self.redirected(path, **kwargs)
        if copy is None or not flags & self.WRITING_FLAGS:
            return self.original_os_open(copy if copy is not None and copy.exists() else path, flags, *args, **kwargs)
        return self.original_os_open(self.kept(copy), flags, *args, **kwargs)

    def open(self, file, mode="r", *args, **kwargs):
        copy = self.redirected(file)
        if copy is None:
            return self.original_open(file, mode, *args, **kwargs)
        if any(flag in mode for flag in "wax+"):
            self.kept(copy)
            if ("a" in mode or "+" in mode) and not copy.exists() and Path(file).exists():
                copy.write_bytes(Path(file).read_bytes())  # an append or update starts from the user's file
            return self.original_open(copy, mode, *args, **kwargs)
        return self.original_open(copy if copy.exists() else file, mode, *args, **kwargs)

    def path_call(self, name: str) -> Callable:
        original = self.originals[name]

        def call(path, *args, **kwargs):
            copy = self.redirected(path, **kwargs)
            if copy is None:
                return original(path, *args, **kwargs)
            self.kept(copy)
            if name in ("makedirs", "mkdir"):
                return self.originals["makedirs"](copy, exist_ok=True)
            if name in ("replace", "rename"):
                return self.moved(name, path, copy, args[0])
            return original(copy) if copy.exists() else None  # the user's own file stays

        return call

    def moved(self, name: str, path, copy: Path, destination):
        target = self.redirected(destination)
        target = self.kept(target) if target is not None else destination
        if copy.exists():
            return self.originals[name](copy, target)
        with self.original_open(path, "rb") as source, self.original_open(target, "wb") as out:
            out.write(source.read())  # the user's file is copied where it would go; it stays
        return None

    def save(self, obj, f, *args, **kwargs):  # a path is written by torch's C++ writer, past `open`
        copy = self.redirected(f)
        return self.original_save(obj, self.kept(copy) if copy is not None else f, *args, **kwargs)

    def load(self, f, *args, **kwargs):
        copy = self.redirected(f)
        return self.original_load(copy if copy is not None and copy.exists() else f, *args, **kwargs)


@contextmanager
def as_main(script: Path, args: list[str], cwd: Path, printed: "LastLine") -> Iterator[None]:
    """The process as `python SCRIPT ARGS` in `cwd` would see it: argv, the script's folder
    first on sys.path, no standard input; what it prints is followed for its last line."""
    saved = (sys.argv, list(sys.path), os.getcwd(), sys.stdin, sys.stdout)
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.parent))
    os.chdir(cwd)
    sys.stdin = open(os.devnull)
    sys.stdout = printed
    try:
        yield
    finally:
        sys.stdin.close()
        sys.argv, sys.path[:], sys.stdin, sys.stdout = saved[0], saved[1], saved[3], saved[4]
        os.chdir(saved[2])


class LastLine(io.TextIOBase):
    """A stdout that passes everything on and keeps the last non-empty line."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.last = stream, ""

    def write(self, text: str) -> int:
        lines = [line for line in text.splitlines() if line.strip()]
        if lines:
            self.last = lines[-1].strip()
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


class Profiled:
    """The torch profiler over the timed window, each step marked (`STEP_LABEL`)."""

    def __init__(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self.profile = profile(activities=[ProfilerActivity.CPU])
        self.step: Any = None

    def on_window(self, moment: str) -> None:
        from torch.profiler import record_function

        if moment == "start":
            self.profile.__enter__()
        elif self.step is not None:
            self.step.__exit__(None, None, None)
        if moment == "end":
            self.step = None
            self.profile.__exit__(None, None, None)
            return
        self.step = record_function(STEP_LABEL)
        self.step.__enter__()

    def summary(self, steps: int, compute_s: float) -> dict:
        return summarize_profile(self.profile.events(), steps, compute_s, on_cuda=False)
