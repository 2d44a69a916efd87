"""The parent side of a data-parallel measurement: each node's ranks started by torchrun
(`advisor.harness.torchrun`: torchrun, ended as it returns) behind the node's `launch` prefix, watched, and read back.

Nothing but a command line reaches a node: the spec travels in it (`rank.encode`), and the
result comes back on node 0's stdout. Every node's launch process asks to die with advisor
(PR_SET_PDEATHSIG, kept across the prefix's exec), each rank with its torchrun agent, and
every node's process tree is killed when the measurement ends, however it ends. A prefix that
leaves this machine (ssh, srun) ends its remote side when its connection closes.
"""

from __future__ import annotations

import errno
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from advisor.errors import UserError, WorkloadInvalid
from advisor.failures import hung
from advisor.harness import lifetime
from advisor.harness.rank import FAILED_MARK, INVALID_MARK, RESULT_MARK, encode
from advisor.measure import Measurement, ResourceSampler, default_memory_limit_mb, kill_tree

POLL_S = 0.05
FAILURE_GRACE_S = 3.0  # after one node fails, how long the others may take to end on their own
LOG_TAIL_CHARS = 4000


def run_ranks(config, plan: dict, mode: str, steps: int, timeout_s: float,
              memory_limit_mb: Optional[float] = None) -> Measurement:
    """Runs one measurement of a data-parallel job on every node; the job's rate is the global
    batch over the slowest rank's step (`rank.combined`)."""
    distributed = config.workload.distributed
    host, port = rendezvous(distributed.rendezvous)
    spec = encode({"config": str(config.path), "plan": plan, "mode": mode, "steps": steps, "timeout_s": timeout_s})
    with lifetime.measurement_slot(), tempfile.TemporaryDirectory(prefix=lifetime.run_folder_prefix()) as folder:
        started = time.perf_counter()
        nodes = []
        try:
            for node in range(distributed.nodes):
                nodes.append(start_node(distributed, node, host, port, spec, Path(folder)))
            with ResourceSampler(nodes[0].pid, memory_limit_mb or default_memory_limit_mb(),
                                 budget=memory_limit_mb is not None) as sampler:
                timed_out = wait_for_nodes(nodes, timeout_s)
        finally:
            for process in nodes:
                kill_tree(process.pid)
                process.wait()
        wall_s = time.perf_counter() - started
        outputs = [(Path(folder) / f"node{n}.out").read_text(errors="replace") for n in range(len(nodes))]
        logs = [(Path(folder) / f"node{n}.err").read_text(errors="replace") for n in range(len(nodes))]
    memory = sampler.memory.to_dict()
    common = {"wall_s": wall_s, "peak_memory_mb": memory["peak_mb"], "memory_source": memory["method"], "memory": memory}
    invalid = marked(logs, INVALID_MARK)
    if invalid:
        raise WorkloadInvalid(invalid)
    result = marked(outputs[:1], RESULT_MARK)
    if result:  # printed once every rank's readings were gathered: how the nodes ended after it is no matter
        return measurement(result, mode, plan, common)
    reason = (hung(timeout_s) if timed_out
              else sampler.killed_reason or failure_of(nodes, logs, distributed.launch))
    return Measurement.failed(mode, plan, reason, **common)


def measurement(result: str, mode: str, plan: dict, common: dict) -> Measurement:
    import json

    fields = json.loads(result)
    communication = fields.get("communication", {})
    if communication.get("parameters_identical") is False:
        return Measurement.failed(mode, plan, "the ranks' parameters differ after the timed steps: the plan breaks "
                                              "DistributedDataParallel's invariant (every rank holds the same model)",
                                  **common)
    fields.pop("window", None)
    fields.pop("memory_end", None)
    return Measurement.from_dict({**fields, **common, "mode": mode, "plan": plan, "status": "ok"})


def rendezvous(address: Optional[str]) -> tuple[str, int]:
    """Node 0's host and port: as configured (checked free where the host is this machine), or
    127.0.0.1 and a port the kernel picks."""
    if address is None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return "127.0.0.1", probe.getsockname()[1]
    host, port = address.rsplit(":", 1)
    check_port_free(host, int(port))
    return host, int(port)


def check_port_free(host: str, port: int) -> None:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(f"workload.distributed.rendezvous: port {port} on {host} is already taken; stop what "
                                "holds it, or pick a free port") from None
            # another machine's (or namespace's) address: only node 0 can tell


def node_command(distributed, node: int, host: str, port: int, spec: str) -> list[str]:
    """The node's launch prefix (with `{node}` filled in), then torchrun running the rank entry."""
    prefix = shlex.split(distributed.launch.replace("{node}", str(node))) if distributed.launch else []
    torchrun = [sys.executable, "-m", "advisor.harness.torchrun", f"--nnodes={distributed.nodes}",
                f"--nproc-per-node={distributed.ranks_per_node}", f"--node-rank={node}", f"--master-addr={host}",
                f"--master-port={port}", "--max-restarts=0", "--monitor-interval=0.1", f"--log-dir={os.devnull}"]
    return prefix + torchrun + ["-m", "advisor.harness.rank", spec]  # --log-dir: no folder of torchrun's is left behind


def start_node(distributed, node: int, host: str, port: int, spec: str, folder: Path) -> subprocess.Popen:
    command = node_command(distributed, node, host, port, spec)
    with open(folder / f"node{node}.out", "wb") as out, open(folder / f"node{node}.err", "wb") as err:
        try:
            return subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=str(package_root()),
                                    start_new_session=True, preexec_fn=lifetime.die_with_parent)
        except OSError as exc:
            raise UserError(f"workload.distributed.launch: node {node}'s command cannot start ({exc.strerror}: "
                            f"{command[0]}); fix the prefix") from None


def package_root() -> Path:
    """The folder advisor's package sits in: `python -m advisor.harness.rank` finds it from there."""
    return Path(__file__).resolve().parents[2]


def wait_for_nodes(nodes: list[subprocess.Popen], timeout_s: float) -> bool:
    """Waits until every node is done, or one failed (the others then get FAILURE_GRACE_S to
    end on their own, printing what they have, before the caller stops them); True when the
    time limit passed instead."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        codes = [process.poll() for process in nodes]
        if all(code is not None for code in codes):
            return False
        if any(code not in (None, 0) for code in codes):
            grace = time.monotonic() + FAILURE_GRACE_S
            while time.monotonic() < grace and any(process.poll() is None for process in nodes):
                time.sleep(POLL_S)
            return False
        time.sleep(POLL_S)
    return True


def marked(texts: list[str], mark: str) -> str:
    """The rest of the first line that starts with `mark` (after any prefix torchrun adds)."""
    for text in texts:
        for line in text.splitlines():
            if mark in line:
                return line.split(mark, 1)[1].strip()
    return ""


TELLING = ("what():", "Error:", "Error ", "exitcode")  # a C++ abort's reason first, then Python's, then torchrun's


def last_words(log: str) -> str:
    """The line of a node's log that says most about why it stopped."""
    lines = [line.strip() for line in log.splitlines() if line.strip().strip("=*")]
    for word in TELLING:
        telling = [line for line in lines if word in line and "error_file" not in line]
        if telling:
            return telling[0 if word == "what():" else -1][:300]
    return lines[-1][:300] if lines else "no output"


def failure_of(nodes: list[subprocess.Popen], logs: list[str], launch: Optional[str]) -> str:
    """Why a distributed run gave no result, in one line: a rank's own reason, else the first
    node that failed and its last words (its launch prefix's, where the ranks never started)."""
    reason = marked(logs, FAILED_MARK)
    if reason:
        return reason
    for node, (process, log) in enumerate(zip(nodes, logs)):
        if process.returncode not in (0, None, -9):
            words = last_words(log)
            started = "torch.distributed" in log or "torchrun" in log.lower()
            where = f"node {node}'s launch ({launch})" if launch and not started else f"node {node}"
            return f"crashed: {where} exited with status {process.returncode}: {words}"
    return "crashed: a node stopped without a result"
