"""Whether advisor measures a script at the speed the script runs by hand: the baseline rate of
`advisor diagnose -- python SCRIPT` (its full run, in the run's copy of the machine) against the
script's own log of steps/s, rounds interleaved; also `--unsandboxed` (the interpreter's hooks
alone) beside them, to show what the copy costs.

    python -m experiments.script_overhead [cnn] [gpt] [--rounds 4] [--unsandboxed]

Two script shapes: a DataLoader over a Dataset (configs/train.py,
its storage latency set to zero: compute-bound) and tokens sliced from a memory-mapped file with
no DataLoader (gpt_memmap.py, nanoGPT's shape). The bar: advisor's rate within 5% of the
script's own.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from experiments.scripts import plain_rate, script_source

ROOT = Path(__file__).resolve().parent.parent
BAR = 0.05
SHAPES = {  # script, its arguments by hand (4 epochs: the first, warming, is left out), advisor's (long enough)
    "cnn": ("train.py", ("--epochs", "4", "--latency-ms", "0", "--images", "4096"),
            ("--epochs", "100", "--latency-ms", "0", "--images", "4096")),
    "gpt": ("gpt_memmap.py", ("--epochs", "4", "--steps", "100"), ("--epochs", "100", "--steps", "100")),
}
WINDOW = {"warmup_steps": 10, "steps": 120}  # advisor's timed steps: about as many as an epoch by hand


def advisor_rate(folder: Path, script: str, args: tuple[str, ...], unsandboxed: bool) -> float:
    """Steps/s of the baseline's full run, as `advisor diagnose --json` measured it."""
    config = folder / "advisor.yaml"
    config.write_text(json.dumps({"name": "overhead", "workload": {"kind": "script", "script": script, "args": list(args)},
                                  "measure": WINDOW}))
    command = [sys.executable, "-m", "advisor.cli", "diagnose", str(config), "--json", "-q",
               *(["--unsandboxed"] if unsandboxed else [])]
    output = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(folder)}).stdout
    return json.loads(output)["evidence"]["runs"]["full"]["samples_per_s"]


def measure(name: str, rounds: int, unsandboxed: bool) -> None:
    from advisor.verdict import paired_interval

    script, by_hand_args, advisor_args = SHAPES[name]
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        shutil.copy(script_source(script), folder / script)
        if name == "gpt":
            subprocess.run([sys.executable, script, "--make-data"], cwd=folder, check=True)
        arms = {"by hand": lambda: plain_rate(folder, script, by_hand_args, {"HOME": temporary}),
                "advisor": lambda: advisor_rate(folder, script, advisor_args, False)}
        if unsandboxed:
            arms["unsandboxed"] = lambda: advisor_rate(folder, script, advisor_args, True)
        ratios: dict[str, list[float]] = {arm: [] for arm in arms if arm != "by hand"}
        for index in range(rounds):
            order = list(arms) if index % 2 == 0 else list(arms)[::-1]
            rates = {arm: arms[arm]() for arm in order}
            for arm in ratios:
                ratios[arm].append(rates[arm] / rates["by hand"])
            print(f"{name}: round {index + 1}: " + ", ".join(f"{arm} {rate:.2f} steps/s" for arm, rate in rates.items()),
                  flush=True)
    for arm, values in ratios.items():
        ratio, low, high = paired_interval(values)
        verdict = ("within" if abs(ratio - 1) <= BAR else "OUTSIDE") + f" {BAR:.0%}"
        if low < 1 - BAR or high > 1 + BAR:
            verdict += f" at its mean; its interval is wider than {BAR:.0%}: more rounds to pin it"
        print(f"{name}: {arm} / by hand {ratio:.3f} ({low:.3f}-{high:.3f}, {len(values)} rounds), {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(SHAPES))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--unsandboxed", action="store_true", help="also `--unsandboxed`: what the copy costs")
    args = parser.parse_args()
    for name in args.names:
        measure(name, args.rounds, args.unsandboxed)


if __name__ == "__main__":
    main()
