"""Does the C allocator's state differ between advisor's measurement and a plain loop? Each loop's
rate and minor page faults a step, for the baseline and a plan, in the same rounds.

    python -m experiments.heap_state CONFIG PLAN_JSON [--rounds 6]

A training step that frees its gradients at its end hands them back to the kernel when glibc's
trim threshold (moved by what the process freed before) lies under what sits free at the heap's
top; the next step faults every page in again. Which side of that line a process falls on is its
history's doing, so two loops running the same job can differ by a page fault a page of
gradients: this prints how often each does (the allocator recipe's fixed thresholds end it).
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from advisor.config import load_config
from advisor.kinds import baseline_plan
from advisor.session import round_measures
from advisor.verify import paired_interval
from experiments.reproduce import plain_result

RUNS = (("advisor", "baseline"), ("plain", "baseline"), ("advisor", "plan"), ("plain", "plan"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("plan", type=Path, help="a JSON object of the plan's knobs (a claim's `plan`)")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    config_path = args.config.resolve()
    config, plan = load_config(config_path), json.loads(args.plan.read_text())
    measure, measure_reference = round_measures(config)

    def advisor(run) -> tuple[float, float]:
        return run.samples_per_s, run.page_faults_per_step

    def plain(plan_file: Path) -> tuple[float, float]:
        result = plain_result(config_path, plan_file)
        return result["samples_per_s"], result["page_faults_per_step"]

    with tempfile.TemporaryDirectory() as folder:
        baseline_file, plan_file = Path(folder) / "baseline.json", Path(folder) / "plan.json"
        baseline_file.write_text("{}")
        plan_file.write_text(json.dumps(plan))
        runs = {("advisor", "baseline"): lambda: advisor(measure_reference(baseline_plan(config))),
                ("plain", "baseline"): lambda: plain(baseline_file),
                ("advisor", "plan"): lambda: advisor(measure({**baseline_plan(config), **plan})),
                ("plain", "plan"): lambda: plain(plan_file)}
        seen: dict = {name: [] for name in RUNS}
        for index in range(args.rounds):
            for name in RUNS[index % len(RUNS):] + RUNS[:index % len(RUNS)]:
                seen[name].append(runs[name]())
            print(f"round {index + 1}/{args.rounds}: " + ", ".join(
                f"{loop} {what} {seen[(loop, what)][-1][0]:,.0f}/s {seen[(loop, what)][-1][1]:,.0f} faults/step"
                for loop, what in RUNS), flush=True)
    for loop, what in RUNS:
        rates, faults = zip(*seen[(loop, what)])
        print(f"{loop:<8}{what:<9} {statistics.fmean(rates):8,.0f}/s   page faults a step: mean {statistics.fmean(faults):7,.0f}, "
              f"{min(faults):,.0f}-{max(faults):,.0f}")
    for what in ("baseline", "plan"):
        mid, low, high = paired_interval([a[0] / p[0] for a, p in zip(seen[("advisor", what)], seen[("plain", what)])])
        print(f"advisor / plain, {what}: {mid:.3f}x (95% {low:.3f}-{high:.3f}x)")


if __name__ == "__main__":
    main()
