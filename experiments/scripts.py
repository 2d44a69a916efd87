"""The two script references (experiments/workloads/scripts), optimized as a user would run
them, then each one's verified #1 applied by hand to a copy of the script and timed by the
script's own log, against the script unchanged.

    python -m experiments.scripts [cnn] [lm] [--rounds 4] [--trials 8]

For each reference: a session (`advisor optimize --json -q` on a config beside a copy of the
script, in a temporary folder), then `--rounds` interleaved pairs of plain runs (the order
alternating, each run a fresh `python SCRIPT`). A plain run's rate is the mean of the steps/s
its own log prints for each epoch after the first. Prints the diagnosis, the verified #1 with its
interval, the rate the edited script reached, and the error against the claim (the bar is 10%).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "experiments" / "workloads" / "scripts"


def script_source(file: str) -> Path:
    """A reference script's file: the template's train.py (configs/), or one of experiments' own."""
    return ROOT / "configs" / file if file == "train.py" else SCRIPTS / file
BAR = 0.10


@dataclass(frozen=True)
class Reference:
    script: str
    files: tuple[str, ...]  # copied beside it
    args: tuple[str, ...]  # the session's: long enough that the script never ends first
    plain_args: tuple[str, ...]  # a plain run's
    forward_lines: tuple[str, ...]  # what amp wraps, by hand: the forward and the loss
    model_line: str  # the line after which the model exists: compile goes after it


REFERENCES = {
    "cnn": Reference("train.py", (), ("--epochs", "100"), ("--epochs", "3"),
                     ("loss = nn.functional.cross_entropy(model(images), labels)",),
                     "optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)"),
    "lm": Reference("lm_train.py", ("lm_model.py",), ("--epochs", "100"), ("--epochs", "3"),
                    ("output, hidden = model(data, hidden)", "loss = nn.functional.cross_entropy(output, targets)"),
                    "model = RNNModel(vocabulary)"),
}


def by_hand(source: str, changes: dict, reference: Reference) -> str:
    """The script as a user edits it to follow the recommendation (the allocator's variables go
    in the environment, `environment_of`)."""
    for key, value in changes.items():
        if key.startswith("dataloader."):
            continue
        if key == "amp.dtype" and value:
            first, *rest = reference.forward_lines
            indent = re.search(rf"\n( *){re.escape(first)}", source).group(1)
            block = f"with torch.autocast('cpu', dtype=torch.{value}):\n" + "".join(
                f"{indent}    {line}\n" for line in reference.forward_lines)
            source = source.replace(first + "\n", block, 1)
            for line in rest:
                source = source.replace(f"{indent}{line}\n", "", 1)
        elif key == "compile.mode" and value:
            indent = re.search(rf"\n( *){re.escape(reference.model_line)}", source).group(1)
            source = source.replace(reference.model_line + "\n", f"{reference.model_line}\n{indent}model.compile(mode={value!r})\n", 1)
        elif key == "threads.intra_op" and value:
            source = source.replace("    torch.manual_seed(", f"    torch.set_num_threads({value})\n    torch.manual_seed(", 1)
        elif key != "allocator.keep_mb":
            raise SystemExit(f"{key} has no by-hand form here; extend experiments.scripts.by_hand")
    loader = {key.split(".", 1)[1]: value for key, value in changes.items() if key.startswith("dataloader.")}
    if loader:
        options = "".join(f", {name}={value!r}" for name, value in loader.items()
                          if name != "pin_memory" and (loader.get("num_workers") or name == "num_workers"))
        source = re.sub(r"(DataLoader\(.*)\)\n", lambda match: f"{match.group(1)}{options})\n", source, count=1)
    return source


def environment_of(changes: dict) -> dict:
    from advisor.recipes.allocator import thresholds

    keep_mb = changes.get("allocator.keep_mb")
    return {name: str(value) for name, value in thresholds(keep_mb).items()} if keep_mb else {}


def plain_rate(folder: Path, script: str, args: tuple[str, ...], environment: dict) -> float:
    """Steps/s by the script's own log: the mean over its epochs after the first."""
    output = subprocess.run([sys.executable, script, *args], cwd=folder, env={**os.environ, **environment},
                            capture_output=True, text=True, check=True).stdout
    rates = [float(rate) for rate in re.findall(r"([0-9.]+) steps/s", output)]
    return sum(rates[1:]) / len(rates[1:])


def session(folder: Path, name: str, reference: Reference, trials: int) -> dict:
    config = folder / "advisor.yaml"
    config.write_text(json.dumps({"name": name, "workload": {"kind": "script", "script": reference.script,
                                                             "args": list(reference.args)},
                                  "search": {"trials": trials, "time_budget_s": 420}}))
    ranked = subprocess.run([sys.executable, "-m", "advisor.cli", "optimize", str(config), "--json", "-q"],
                            cwd=folder, capture_output=True, text=True, check=True).stdout
    return json.loads((Path(json.loads(ranked)["results"]) / "recommendations.json").read_text())


def reproduce(name: str, reference: Reference, rounds: int, trials: int) -> None:
    from advisor.verdict import paired_interval

    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        for file in (reference.script, *reference.files):
            shutil.copy(script_source(file), folder / file)
        payload = session(folder, name, reference, trials)
        diagnosis = payload["diagnoses"][0]
        print(f"{name}: {diagnosis['summary']}")
        verified = [r for r in payload["recommendations"] if r["verified"]]
        if not verified:
            print(f"{name}: no verified recommendation")
            return
        top = verified[0]
        low, high = top["interval"]
        print(f"{name}: #1 {top['changes']}: {top['speedup']:.2f}x ({low:.2f}-{high:.2f}x) verified")
        edited = "edited_" + reference.script
        (folder / edited).write_text(by_hand((folder / reference.script).read_text(), top["changes"], reference))
        environment = environment_of(top["changes"])
        ratios = []
        for index in range(rounds):
            runs = [("base", reference.script, {}), ("fixed", edited, environment)]
            rates = {label: plain_rate(folder, script, reference.plain_args, env)
                     for label, script, env in (runs if index % 2 == 0 else runs[::-1])}
            ratios.append(rates["fixed"] / rates["base"])
            print(f"{name}:   pair {index + 1}: {rates['base']:.1f} -> {rates['fixed']:.1f} steps/s ({ratios[-1]:.2f}x)")
        measured, low, high = paired_interval(ratios)
        error = measured / top["speedup"] - 1
        print(f"{name}: by hand {measured:.2f}x ({low:.2f}-{high:.2f}x) against {top['speedup']:.2f}x claimed: "
              f"error {error:+.1%}, {'within' if abs(error) <= BAR else 'OUTSIDE'} {BAR:.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(REFERENCES))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--trials", type=int, default=8)
    args = parser.parse_args()
    for name in args.names:
        reproduce(name, REFERENCES[name], args.rounds, args.trials)


if __name__ == "__main__":
    main()
