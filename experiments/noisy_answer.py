"""How long a noisy job waits for an answer: a verified fix, or a verdict that rules fixes out or
says they are not settled.

    python -m experiments.noisy_answer [--sessions 3] [--spread 0.15] [--check-spread 6]

The job is the small GPT trained from a memory-mapped token file (workloads/scripts/gpt_memmap.py),
unmodified but for one line: each process draws its own pace once, from the operating system's
entropy (never from a seed advisor sets), and sleeps that long after every step, so its rate
moves by about +-`--spread` from run to run, as on a machine whose other work comes and goes.
`--check-spread N` first runs the script N times plainly and prints the rates, to show the spread.
`--logs DIR` keeps each session's output, each line stamped with the seconds since its start.

Each session is `advisor optimize -- python noisy_gpt.py ...` with the defaults, in a fresh
folder. Prints, a session a line: when its first fix was verified (if one was), when the
session ended, its #1, and the lines that say what it settled when nothing was verified.
The goal (issue 56's 4): an answer within 300 s.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.first_fix import FIRST_FIX

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "experiments" / "workloads" / "scripts" / "gpt_memmap.py"
SETTLED = re.compile(r"^(ruled out at|not settled|nothing clears the bar).*", re.M)


def noisy_source(spread: float, step_s: float) -> str:
    """The script with its own pace: after each step a pause drawn once a process, uniform in
    [0, 2 x spread x step_s], so the rate moves about +-spread around its mean."""
    source = SCRIPT.read_text()
    pause = ("import random\n\nPAUSE = random.SystemRandom().uniform(0.0, "
             f"{2 * spread * step_s:.4f})  # this process's own pace: drawn from the OS, never from a seed\n")
    source = source.replace("import numpy as np\n", pause + "import numpy as np\n", 1)
    return source.replace("            optimizer.step()\n", "            optimizer.step()\n            time.sleep(PAUSE)\n", 1)


def plain_rates(folder: Path, runs: int) -> list[float]:
    rates = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "noisy_gpt.py", "--epochs", "3", "--out", "ck"], cwd=folder,
                             capture_output=True, text=True, check=True).stdout
        rates.append(sum(float(r) for r in re.findall(r"([0-9.]+) steps/s", out)[1:]) / 2)
    return rates


def one_session(folder: Path, log: Path | None) -> dict:
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "advisor.cli", "optimize", "--", "python", "noisy_gpt.py",
                                "--epochs", "100000", "--out", "ck"],
                               cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, stamped, first = [], [], None
    for line in process.stdout:
        output.append(line)
        stamped.append(f"{time.perf_counter() - started:6.1f}  {line}")
        if first is None and FIRST_FIX.search(line):
            first = time.perf_counter() - started
    process.wait()
    text = "".join(output)
    if log is not None:  # each line with the seconds since the start: where a session's time went
        log.write_text("".join(stamped))
    results = re.search(r"results: (\S+)", text)
    payload = json.loads((Path(results.group(1)) / "recommendations.json").read_text()) if results else {}
    top = (payload.get("recommendations") or [None])[0]
    return {"first_s": first, "whole_s": time.perf_counter() - started, "code": process.returncode,
            "top": top and f"{'+'.join(top['recipes'])} {top['speedup']:.2f}x "
                           f"({top['interval'][0]:.2f}-{top['interval'][1]:.2f}x) {'verified' if top['verified'] else 'not verified'}",
            "settled": [m.group(0) for m in SETTLED.finditer(text)],
            "trials": len(payload.get("trials", [])) + len(payload.get("pruned", [])), "ruled_out": len(payload.get("ruled_out", []))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--spread", type=float, default=0.15)
    parser.add_argument("--step-ms", type=float, default=29.0, help="the script's step here, unpaused")
    parser.add_argument("--check-spread", type=int, default=0, help="plain runs first, to show the spread")
    parser.add_argument("--logs", type=Path, help="a folder to keep each session's output in")
    args = parser.parse_args()
    for index in range(args.sessions + (1 if args.check_spread else 0)):
        with tempfile.TemporaryDirectory(prefix="noisy-") as name:
            folder = Path(name)
            (folder / "noisy_gpt.py").write_text(noisy_source(args.spread, args.step_ms / 1000))
            shutil.copy(SCRIPT, folder / "gpt_memmap.py")  # its original, for a reader comparing
            subprocess.run([sys.executable, "noisy_gpt.py", "--make-data"], cwd=folder, check=True)
            if args.check_spread and index == 0:
                rates = plain_rates(folder, args.check_spread)
                print(f"plain runs: {', '.join(f'{r:.1f}' for r in rates)} steps/s "
                      f"(min/max {min(rates) / max(rates):.2f})", flush=True)
                continue
            done = one_session(folder, args.logs / f"session-{index}.txt" if args.logs else None)
        first = "none" if done["first_s"] is None else f"{done['first_s']:.0f} s"
        print(f"session {index + (0 if args.check_spread else 1)}: exit {done['code']}, first verified fix {first}, "
              f"ended {done['whole_s']:.0f} s, {done['trials']} trials ({done['ruled_out']} plans ruled out); "
              f"#1 {done['top']}", flush=True)
        for line in done["settled"]:
            print(f"    {line}", flush=True)


if __name__ == "__main__":
    main()
