"""Re-tuning on a reference workload, end to end, timed:

    python -m experiments.retune_check

In a scratch copy of the quickstart (its config beside a copy of configs/cnn.py):
1. `advisor optimize` (timed); 2. `advisor retune` with nothing changed (timed: it must take
under a quarter of the optimize, and say whether the advice holds); 3. an edit to the model's
source (the second convolution twice as wide); 4. `advisor retune`, which must name the change,
re-tune warm-started (the previous best plan among the first trials) and log a session linked
to the one it re-checked. Prints what it saw and the timings.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from mlflow import MlflowClient

from experiments import config_path

ROOT = Path(__file__).resolve().parent.parent


def advisor(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "advisor.cli", *args], capture_output=True, text=True, cwd=ROOT)
    return done, time.perf_counter() - started


def scratch_quickstart(folder: Path) -> Path:
    shutil.copy(ROOT / "configs" / "cnn.py", folder / "cnn.py")
    config = yaml.safe_load((config_path("quickstart")).read_text())
    config["workload"]["model"] = "cnn.py:build_model"
    config["workload"]["dataset"] = "cnn.py:build_dataset"
    path = folder / "quickstart.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def widen_second_convolution(source: Path) -> None:
    text = source.read_text()
    wider = text.replace("nn.Conv2d(width, width * 2, 3, padding=1)", "nn.Conv2d(width, width * 4, 3, padding=1)")
    wider = wider.replace("nn.Linear(width * 2 * 8 * 8, classes)", "nn.Linear(width * 4 * 8 * 8, classes)")
    assert wider != text, "the model source no longer has the layer this experiment widens"
    source.write_text(wider)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="advisor-retune-") as scratch:
        config = scratch_quickstart(Path(scratch))
        optimized, optimize_s = advisor("optimize", str(config))
        assert optimized.returncode == 0, optimized.stderr[-2000:]
        best = re.search(r"^1\s+(\S+)\s+(\S+x)", optimized.stdout, re.M)
        print(f"optimize: {optimize_s:.1f} s, #1 {best.group(1)} {best.group(2)}")

        unchanged, unchanged_s = advisor("retune", str(config))
        print(f"retune, nothing changed: {unchanged_s:.1f} s = {unchanged_s / optimize_s:.0%} of the optimize "
              f"(bar: 25%), exit {unchanged.returncode}")
        print("  " + "\n  ".join(unchanged.stdout.strip().splitlines()[:3]))

        widen_second_convolution(Path(scratch) / "cnn.py")
        changed, changed_s = advisor("retune", str(config))
        print(f"retune after widening a layer: {changed_s:.1f} s, exit {changed.returncode}")
        summary = [line for line in changed.stdout.splitlines() if line.startswith(("retune", "  "))]
        print("  " + "\n  ".join(summary[:6]))
        previous_plan = re.search(r"^\s+(\S+=\S+(?:, \S+=\S+)*)$", optimized.stdout, re.M).group(1)
        first_trials = [line for line in changed.stderr.splitlines() if line.strip().startswith("trial #")][:4]
        print("  first trials of the new session:")
        print("    " + "\n    ".join(first_trials))
        print(f"  previous best plan ({previous_plan}) among them: "
              f"{any(previous_plan in line for line in first_trials)}")

        client = MlflowClient(tracking_uri=f"sqlite:///{Path(scratch) / 'mlflow.db'}")
        experiment = client.get_experiment_by_name("quickstart")
        sessions = client.search_runs([experiment.experiment_id], "tags.kind = 'session'",
                                      order_by=["attributes.start_time ASC"])
        first, last = sessions[0], sessions[-1]
        print(f"  MLflow: {len(sessions)} sessions; the new one has retune_of={last.data.tags.get('retune_of')} "
              f"(the first session is {first.info.run_id}): linked {last.data.tags.get('retune_of') == first.info.run_id}")


if __name__ == "__main__":
    main()
