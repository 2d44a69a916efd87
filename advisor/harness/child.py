"""What a measurement child runs (started by `launch`, or as `python -m advisor.harness.child SPEC RESULT`).

Reads a JSON spec (config path, plan, mode, steps), runs the workload and writes a JSON result:
status "ok" with the measurement fields, "invalid" when the user's workload breaks its contract
(the parent turns that into a one-line error), or "failed" with the reason.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Optional

from advisor.errors import UserError
from advisor.failures import out_of_disk

OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory", "MemoryError")
DISK_FULL = "No space left on device"  # ENOSPC's words


def main(spec_path: str, result_path: str, interpreter: str, config: bytes) -> int:
    """`config`: the config object pickled by value, as the parent handed it to this process at its start."""
    with open(spec_path) as handle:
        spec = json.load(handle)
    try:
        result = {"status": "ok", **run_spec(spec, config), "interpreter": interpreter, "compile_cache": compile_cache_use()}
    except UserError as exc:
        reason = str(exc)
        if not reason.startswith(spec["config"]):
            reason = f"{spec['config']}: {reason}"
        result = {"status": "invalid", "reason": reason}
    except BaseException as exc:  # a failed trial is data for the parent, never a lost study
        reason = failure_reason(exc, spec.get("plan") or {})
        if spec.get("sandbox") and DISK_FULL in reason:
            reason = f"{out_of_disk(os.path.dirname(spec['scratch']))} ({reason})"
        result = {"status": "failed", "reason": reason}
        traceback.print_exc()
    with open(result_path, "w") as handle:
        json.dump(result, handle)
    return 0


def run_spec(spec: dict, pickled: bytes) -> dict:
    """Runs the spec's job through its kind's child side (`WorkloadSection.run_child`): the child
    imports the loop it runs, never the parent's judgement."""
    config = read_config(pickled)
    return config.workload.run_child(config, spec)


def compile_cache_use() -> dict:
    """The graphs torch.compile found in its cache ("hits") and compiled anew ("misses") in this
    run; {} where nothing compiled. A run of hits alone paid little of a compile's one-off cost."""
    if "torch._dynamo" not in sys.modules:
        return {}
    from torch._dynamo.utils import counters

    found = {"hits": counters["inductor"]["fxgraph_cache_hit"], "misses": counters["inductor"]["fxgraph_cache_miss"]}
    return found if any(found.values()) else {}


def read_config(pickled: bytes):
    """The config, as the parent handed it to this process at its start (never read from a file,
    which another process could replace)."""
    import pickle

    return pickle.loads(pickled)


def failure_reason(exc: BaseException, plan: Optional[dict] = None) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first_line = lines[0] if lines else type(exc).__name__
    if len(lines) > 1:  # e.g. a DataLoader worker's error: the wrapper's line, then the original's last
        first_line = f"{first_line} {lines[-1]}"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    if any(marker.lower() in text.lower() for marker in OOM_MARKERS):
        return f"out of memory: {first_line[:300]}{where}"
    from advisor.recipes import applied

    return f"crashed: {applied('failure', '', plan or {}, text=text)}{first_line[:300]}{where}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
