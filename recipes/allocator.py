"""The C allocator's thresholds: keep freed memory in the process instead of handing it back.

glibc returns a freed block above its mmap threshold to the kernel at once, and trims the heap's
top once more than twice that threshold lies free there; both thresholds move with what the
process freed before. A training step frees and allocates the same tensors every step, so
under those moving thresholds a loop can pay a page fault for every page of its gradients and
activations, every step, or not, by the history of its heap. Fixed thresholds keep the memory
and end that: measured on compute_bound's MLP, 2,070 against 2,570 samples/s in fp32 and 2,890
against 4,640 under bf16 autocast, a third of the page faults (experiments/allocator.py).

The numbers are the same: exact. It costs the memory the process keeps, which the memory budget
judges like any other plan's peak.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Mapping, Optional

from advisor.recipes.base import Choice, Context, Recipe

# each variable glibc reads at start-up, and mallopt's parameter for it (malloc.h)
MALLOPT = {"MALLOC_TRIM_THRESHOLD_": ("M_TRIM_THRESHOLD", -1), "MALLOC_MMAP_THRESHOLD_": ("M_MMAP_THRESHOLD", -3)}
# the other ways a job may already have tuned its allocator
TUNED_BY = (*MALLOPT, "MALLOC_TOP_PAD_", "GLIBC_TUNABLES", "LD_PRELOAD")


def why_not(context: Context, environ: Mapping[str, str] = os.environ) -> Optional[str]:
    if context.device == "cuda":
        return "the step's tensors live on the GPU, in torch's caching allocator: glibc's thresholds reach host memory only"
    if platform.libc_ver()[0] != "glibc":
        return "the process's C library is not glibc: these thresholds are glibc's"
    tuned = [name for name in TUNED_BY if environ.get(name)]
    return f"the job's environment already sets its allocator ({', '.join(tuned)})" if tuned else None


def thresholds(keep_mb: int) -> dict[str, int]:
    """The variables for a process that keeps up to `keep_mb` freed at its heap's top: blocks
    under half that come from the heap (glibc's own two-to-one between the two thresholds)."""
    return {"MALLOC_TRIM_THRESHOLD_": keep_mb * 2**20, "MALLOC_MMAP_THRESHOLD_": keep_mb * 2**19}


def snippet(plan: dict) -> str:
    values = thresholds(plan["allocator.keep_mb"])
    exports = " ".join(f"{name}={value}" for name, value in values.items())
    return ("# in the shell that starts the job (glibc reads them at start-up; DataLoader workers inherit them):\n"
            f"#   export {exports}\n"
            "# or first thing in the script, before the model is built:\n"
            "import ctypes\n"
            "libc = ctypes.CDLL(None)\n"
            + "\n".join(f"libc.mallopt({MALLOPT[name][1]}, {value})  # {MALLOPT[name][0]}" for name, value in values.items()))


def apply(value: None, plan: dict) -> None:
    """Sets this process's thresholds now (mallopt), and the variables for the processes it
    starts (DataLoader workers under spawn). A fixed threshold also stops glibc moving it."""
    keep_mb = plan.get("allocator.keep_mb")
    if not keep_mb:
        return
    libc = ctypes.CDLL(None)
    for name, value in thresholds(keep_mb).items():
        if not libc.mallopt(MALLOPT[name][1], ctypes.c_int(value)):
            raise RuntimeError(f"glibc refused {name}={value}")
        os.environ[name] = str(value)


RECIPE = Recipe(
    name="allocator",
    summary="fix glibc's malloc thresholds, so the memory each step frees is kept for the next, not faulted in again",
    targets=("compute", "overhead"),
    risk="exact",
    keys=("allocator.keep_mb",),
    why_not=why_not,
    space=lambda context: {"allocator.keep_mb": Choice((0, 256, 1024))},
    snippet=snippet,
    textbook=lambda context: {"allocator.keep_mb": 1024},
    kinds=("train", "distributed", "script"),
    hooks={"process": apply},
    off={"allocator.keep_mb": 0},
)
