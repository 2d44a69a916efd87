"""A script runs in a copy of the machine: every byte outside advisor's own results is as it
was, whichever call wrote it, and every process it started ends with its run, even when
advisor is killed with SIGKILL. Each leak below was once seen under the interpreter's hooks."""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from conftest import ROOT

from advisor.harness.sandbox import unavailable

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(unavailable() is not None, reason=f"no namespaces here: {unavailable()}")]

# A short training loop, its steps (argv[3]) slowed a little: the window sees it running.
TRAINING = '''
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(int(sys.argv[3])):
    loss = model(torch.randn(16, 8)).square().mean()
    optimizer.zero_grad(); loss.backward(); optimizer.step()
    time.sleep(0.01)
'''
# Every shape of write and process a script was seen to leak through the hooks, then the loop.
HOSTILE = '''
import atexit, multiprocessing, os, shutil, sqlite3, subprocess, sys, threading, time
import numpy as np, pandas as pd, torch

OUTSIDE, MARK = sys.argv[1], sys.argv[2]


def write_from_the_pool(name):
    open(name, "w").write("x")


def heartbeat():
    while True:
        open("heartbeat.txt", "w").write(str(time.time()))
        time.sleep(0.05)


if __name__ == "__main__":
    torch.save({"w": 1}, os.path.join(OUTSIDE, "ckpt.pt"))                  # an absolute path: the commonest shape
    os.makedirs(os.path.expanduser("~/.cache/job"), exist_ok=True)         # $HOME
    open(os.path.expanduser("~/.cache/job/state"), "w").write("x")
    os.truncate("data.txt", 0)                                             # calls the hooks never saw
    shutil.rmtree("results")
    os.rmdir("empty")
    np.savetxt("table.txt", np.zeros(3))
    pd.DataFrame({"a": [1]}).to_parquet("frame.parquet")
    folder = os.open(".", os.O_RDONLY)
    os.close(os.open("via_dir_fd.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=folder))
    os.chmod("data.txt", 0o600)
    os.utime("table.txt", (0, 0))
    shutil.copy("existing.txt", "existing.copy")                            # copymode on a path that is new
    os.close(os.open("existing.txt", os.O_WRONLY | os.O_TRUNC))              # O_TRUNC of a file that exists
    subprocess.run(["touch", "touched.txt"], check=True)                     # a child process
    with multiprocessing.get_context("fork").Pool(2) as pool:                # a pool of the script's own
        pool.map(write_from_the_pool, ["pool_0.txt", "pool_1.txt"])
    sqlite3.connect("store.db").execute("create table t (x)")
    os.chdir(OUTSIDE)                                                        # a write after chdir elsewhere
    open("after_chdir.txt", "w").write("x")
    os.chdir(os.path.dirname(os.path.abspath(__file__)))
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", MARK], start_new_session=True)  # a detached helper
    threading.Thread(target=heartbeat).start()                               # a non-daemon thread that writes
    atexit.register(lambda: open(os.path.join(OUTSIDE, "atexit.txt"), "w").write("x"))
''' + "\n".join("    " + line for line in TRAINING.splitlines())


def digest(folder: Path) -> dict:
    """Every path under the folder: its bytes' hash, its mode and its modification time."""
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        found[str(path.relative_to(folder))] = (hashlib.sha1(path.read_bytes()).hexdigest() if path.is_file() else "dir",
                                                info.st_mode, info.st_mtime_ns)
    return found


# A helper started in a session of its own, then a long training loop.
DETACHED = '''
import subprocess, sys, time
import torch
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[2]], start_new_session=True)
''' + TRAINING


def layout(tmp_path: Path, steps: int, script: str = HOSTILE) -> tuple[Path, Path, Path, dict]:
    """The user's folder (reached through a symlink), a folder outside it, a home; their files."""
    real, outside, home = tmp_path / "real", tmp_path / "outside", tmp_path / "home"
    for folder in (real / "results", real / "empty", outside, home):
        folder.mkdir(parents=True)
    (real / "train.py").write_text(script)
    for name, text in (("data.txt", "the user's data"), ("table.txt", "1 2 3"), ("existing.txt", "kept"),
                       ("results/run1.json", "{}")):
        (real / name).write_text(text)
    (outside / "ckpt.pt").write_text("PRECIOUS")
    linked = tmp_path / "linked"
    linked.symlink_to(real)
    mark = f"advisor-sandbox-{uuid.uuid4().hex}"
    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "HOME": str(home),
           "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "advisor.cli", "diagnose", "--json", "--", "python", "train.py", str(outside), mark,
               str(steps)]
    return linked, outside, home, {"command": command, "env": env, "mark": mark}


def marked(mark: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if mark in " ".join(process.info["cmdline"] or []):
            found.append(process)
    return found


@dataclass(frozen=True)
class HostileRun:
    tmp: Path
    before: dict  # folder -> its digest before the run
    after: dict  # folder -> its digest after
    done: subprocess.CompletedProcess
    mark: str

    def unchanged(self, place: str, name: str) -> bool:
        """Whether the path is as it was before the run: there with the same bytes, mode and
        time, or absent as it was."""
        return self.before[place].get(name) == self.after[place].get(name)

    @property
    def writes(self) -> str:
        return "\n".join(json.loads(self.done.stdout)["evidence"]["runs"]["full"]["environment"]["writes"])


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> HostileRun:
    """One `advisor diagnose` of the hostile script (its every run in a copy of the machine),
    the user's folder, a folder outside it and $HOME hashed before and after."""
    tmp = tmp_path_factory.mktemp("hostile")
    linked, outside, home, run = layout(tmp, 400)
    folders = {"real": tmp / "real", "outside": outside, "home": home}
    before = {place: digest(folder) for place, folder in folders.items()}
    done = subprocess.run(run["command"], cwd=linked, env=run["env"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return HostileRun(tmp, before, {place: digest(folder) for place, folder in folders.items()}, done, run["mark"])


# Each leak once seen under the interpreter's hooks: the paths it touched, unchanged after the run
# (place, path), and how the run's list of writes names it.
LEAKS = {
    "absolute path": ([("outside", "ckpt.pt")], "outside/ckpt.pt"),
    "$HOME": ([("home", ".cache"), ("home", ".cache/job/state")], "home/.cache/job/state"),
    "chdir": ([("outside", "after_chdir.txt")], "outside/after_chdir.txt"),
    "truncate": ([("real", "data.txt")], "real/data.txt"),
    "rmtree": ([("real", "results"), ("real", "results/run1.json")], "real/results (deleted)"),
    "numpy": ([("real", "table.txt")], "real/table.txt"),
    "pandas": ([("real", "frame.parquet")], "real/frame.parquet"),
    "rmdir": ([("real", "empty")], "real/empty (deleted)"),
    "dir_fd": ([("real", "via_dir_fd.txt")], "real/via_dir_fd.txt"),
    "chmod/utime": ([("real", "data.txt"), ("real", "table.txt")], "real/data.txt"),
    "subprocess": ([("real", "touched.txt")], "real/touched.txt"),
    "pool": ([("real", "pool_0.txt"), ("real", "pool_1.txt")], "real/pool_0.txt"),
    "sqlite": ([("real", "store.db")], "real/store.db"),
    "thread": ([("real", "heartbeat.txt")], "real/heartbeat.txt"),
    "atexit": ([("outside", "atexit.txt")], None),  # runs at the interpreter's end, which the run never reaches
    "shutil.copy, O_TRUNC": ([("real", "existing.txt"), ("real", "existing.copy")], "real/existing.copy"),
}


@pytest.mark.parametrize("leak", LEAKS)
def test_a_leak_of_the_hooks_stays_in_the_runs_copy(hostile, leak):
    paths, listed = LEAKS[leak]
    for place, name in paths:
        assert hostile.unchanged(place, name), f"{leak}: {place}/{name} changed"
    if listed:
        assert listed in hostile.writes, f"{leak}: {listed} not listed among the run's writes:\n{hostile.writes}"


def test_every_byte_outside_advisors_own_results_is_as_it_was_the_folder_reached_by_a_symlink(hostile):
    """The user's folder (reached through a symlink), the folder outside it and $HOME, whole."""
    for place, was in hostile.before.items():
        assert hostile.after[place] == was, f"{place} changed"


def test_the_processes_a_script_started_end_with_its_run_and_the_report_names_them(hostile):
    assert not marked(hostile.mark), "the detached helper outlived its run"
    environment = json.loads(hostile.done.stdout)["evidence"]["runs"]["full"]["environment"]
    assert environment["sandboxed"] and "python" in " ".join(environment["ended_processes"])
    assert environment["unit"] == "steps/s"


def test_the_runs_writes_are_listed_with_their_sizes(hostile):
    assert re.search(r"outside/ckpt\.pt \([\d,]+ bytes\)", hostile.writes), hostile.writes
    assert re.search(r"real/data\.txt \(0 bytes\)", hostile.writes), "truncated: its size now"


def test_kill_9_of_advisor_leaves_no_process_of_the_run(tmp_path):
    linked, outside, home, run = layout(tmp_path, 100_000, DETACHED)
    advisor = subprocess.Popen(run["command"], cwd=linked, env=run["env"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not marked(run["mark"]) and time.monotonic() < deadline:  # the script is in its loop
        time.sleep(0.2)
    assert marked(run["mark"]), "the script never started its helper"
    tree = [p.pid for p in psutil.Process(advisor.pid).children(recursive=True)]
    os.kill(advisor.pid, signal.SIGKILL)
    advisor.wait()
    running = lambda: [pid for pid in tree  # noqa: E731
                       if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    deadline = time.monotonic() + 5
    while (running() or marked(run["mark"])) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)  # and nothing comes back
    alive, left = running(), marked(run["mark"])
    for process in left:  # the test's own cleanup, where the run failed it
        process.kill()
    assert not alive and not left, f"left running: {alive}, the helper {left}"


def test_without_namespaces_a_script_is_refused_in_one_line_naming_the_way_out(tmp_path, monkeypatch):
    from advisor import api
    from advisor.errors import UserError
    from advisor.harness import sandbox
    from advisor.kinds import parse_config

    (tmp_path / "train.py").write_text("print('never run')")
    config = parse_config({"name": "s", "workload": {"kind": "script", "script": "train.py"}}, tmp_path / "advisor.yaml")
    monkeypatch.setattr(sandbox, "_probed", True)
    monkeypatch.setattr(sandbox, "_unavailable", "unshare: Operation not permitted")
    with pytest.raises(UserError, match=r"\(unshare: Operation not permitted\).*--unsandboxed"):
        api.start_children(config)
    monkeypatch.setenv("ADVISOR_UNSANDBOXED", "1")
    api.start_children(config)  # the user chose the hooks alone


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs: root only")
def test_a_full_disk_under_the_runs_copy_is_one_line_naming_where(tmp_path):
    """The script fills the file system its run's writes go to: each run fails saying where,
    and nothing of the user's is touched."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(small)], check=True)
    try:
        (tmp_path / "train.py").write_text(FILLS_THE_DISK)
        env = {**os.environ, "TMPDIR": str(small), "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-m", "advisor.cli", "diagnose", "--", "python", "train.py"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    finally:
        subprocess.run(["umount", "-l", str(small)], check=True)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert re.search(rf"out of disk: .* under {re.escape(str(small))}, whose file system is full", done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small", "train.py"]


FILLS_THE_DISK = '''
import os, torch
model = torch.nn.Linear(8, 2); optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100000):
    loss = model(torch.randn(16, 8)).square().mean(); optimizer.zero_grad(); loss.backward(); optimizer.step()
    if step == 5:
        with open("big.bin", "wb") as handle:
            handle.write(os.urandom(80 * 2**20))
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="emulates a user without root from root (a user namespace)")
def test_a_user_without_root_gets_the_copy_or_one_line_before_anything_runs(tmp_path):
    """A user without root has no right to mount: the run enters a user namespace of its own
    first (mapping the user to themself), where the kernel will not overlay a file system that
    holds mounts inherited from the machine (/ always does): the copy is built folder by folder.
    Where a kernel refuses even that, the probe, which builds the copy a run builds, says so in
    one line before anything is measured, naming --unsandboxed; never a run that half-builds
    its copy and fails. Here root becomes uid 65534 in a user namespace, which takes the branch
    such a user takes."""
    script = "import os, sys, time\nimport torch\nopen(os.path.join(sys.argv[1], 'ckpt.pt'), 'w').write('overwritten')\n"
    linked, outside, home, run = layout(tmp_path, 400, script + TRAINING)
    before = digest(outside)
    done = subprocess.run(["unshare", "--user", "--map-user=65534", "--map-group=65534", *run["command"]], cwd=linked,
                          env=run["env"], capture_output=True, text=True, timeout=300)
    assert digest(outside) == before
    if done.returncode == 2:  # this kernel refuses the copy without root
        line = done.stderr.strip().splitlines()[-1]
        assert "cannot run in its own copy of the machine here (an overlay of / cannot be mounted" in line, line
        assert "--unsandboxed" in line and "timing the script" not in done.stderr and len(done.stderr.splitlines()) == 1
        return
    assert done.returncode == 0, done.stderr[-3000:]
    environment = json.loads(done.stdout)["evidence"]["runs"]["full"]["environment"]
    assert environment["sandboxed"] and any("outside/ckpt.pt" in write for write in environment["writes"])


def test_a_scripts_rounds_start_ahead_in_their_copys_namespaces_and_keep_every_write_in_the_copy(tmp_path, monkeypatch):
    """A script's verification rounds take new interpreters started ahead, a batch at once, as a
    module's do: each enters the namespaces of a copy of the machine while it has one thread
    (unshare needs it), waits as their pid 1 with torch imported, and builds the copy when its run
    comes. Its run is `fresh`, every write still lands in the copy, the helper the script started
    ends with the run, and none of the interpreters outlives the rounds."""
    from advisor.harness import kept, launch, run_measurement
    from advisor.kinds import kind_of, load_config

    linked, outside, home, run = layout(tmp_path, 400, DETACHED.replace(
        "import torch\n", "import torch\ntorch.save({'w': 1}, sys.argv[1] + '/ckpt.pt')\n", 1))
    (linked / "advisor.yaml").write_text(json.dumps({
        "name": "ahead", "workload": {"kind": "script", "script": "train.py", "args": run["command"][-3:]},
        "measure": {"warmup_steps": 2, "steps": 6}}))
    monkeypatch.chdir(linked)
    config = load_config(linked / "advisor.yaml")
    plan = kind_of(config).baseline_plan(config)
    before, ours = digest(outside), os.readlink("/proc/self/ns/mnt")
    try:
        first = run_measurement(config, plan, "full", 6, 120, fresh="ahead")
        waiting = [interpreter.process.pid for interpreter in launch._ready]
        assert len(waiting) == min(launch.READY_MOST, len(os.sched_getaffinity(0))) - 1
        for pid in waiting:
            pid_one, = psutil.Process(pid).children()
            assert os.readlink(f"/proc/{pid}/ns/mnt") != ours and psutil.Process(pid).num_threads() == 1
            assert "torch" in " ".join(m.path for m in pid_one.memory_maps())
        second = run_measurement(config, plan, "full", 6, 120, fresh="ahead")
    finally:
        kept.close_all()
    for measured in (first, second):
        assert measured.ok and measured.interpreter == "fresh", measured.reason
        assert any(write.startswith(f"{outside}/ckpt.pt") for write in measured.environment["writes"])
    assert digest(outside) == before and not marked(run["mark"])
    assert launch._ready == [] and not [pid for pid in waiting if psutil.pid_exists(pid)
                                        and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_a_scripts_runs_share_one_compile_cache_that_leaves_the_machines_alone(tmp_path, monkeypatch):
    """torch.compile writes its cache under the machine's temp folder; in a copy of the machine
    each run would lose it and compile again (18 s a run on a small GPT, 2 s warm). A script's runs
    keep their writes there in a folder of the session's instead, the machine's cache read
    beneath: the first run of a plan compiles, the next finds every graph in the session's cache,
    neither run's writes (what its copy kept aside) hold a cache file, and the machine's cache
    is as it was."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from advisor.harness import run_measurement
    from advisor.harness.lifetime import session_folder
    from advisor.kinds import kind_of, load_config

    machines = Path(default_cache_dir())  # read beneath the session's cache, never written
    listing = lambda: sorted((str(p), p.stat().st_mtime_ns) for p in machines.rglob("*")) if machines.is_dir() else []  # noqa: E731
    before = listing()
    (tmp_path / "train.py").write_text(
        "import torch\n"
        "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(400):\n"
        "    loss = model(torch.randn(16, 8)).square().mean()\n"
        "    optimizer.zero_grad(); loss.backward(); optimizer.step()\n")
    (tmp_path / "advisor.yaml").write_text(json.dumps({
        "name": "cached", "workload": {"kind": "script", "script": "train.py"}, "measure": {"warmup_steps": 2, "steps": 6}}))
    monkeypatch.chdir(tmp_path)
    config = load_config(tmp_path / "advisor.yaml")
    plan = {**kind_of(config).baseline_plan(config), "compile.mode": "default"}
    first, second = (run_measurement(config, plan, "full", 6, 180) for _ in range(2))
    assert first.ok and second.ok, (first.reason, second.reason)
    assert first.environment["sandboxed"] and first.compile_cache.get("misses"), first.compile_cache
    assert second.compiled_from_cache and not first.compiled_from_cache, second.compile_cache
    cache = Path(session_folder("compile-cache"))
    assert any(cache.rglob("*")) and not any("inductor" in write or str(cache) in write
                                             for run in (first, second) for write in run.environment["writes"])
    assert listing() == before


def test_one_run_at_a_time_holds_the_sessions_compile_cache(tmp_path):
    """Two overlays over one upper layer see each other's writes undefined, so a run holds the
    session's cache alone (a lock its pid 1 keeps until it ends); a run at the same moment is
    refused it, and keeps its writes in its own copy."""
    from advisor.harness.sandbox import held_alone

    lock = tmp_path / "lock"
    assert held_alone(lock) and not held_alone(lock)
    child = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                            "from advisor.harness.sandbox import held_alone; sys.exit(0 if held_alone(Path(sys.argv[1])) else 3)",
                            str(lock)])
    assert child.returncode == 3
