"""Does the C allocator's state differ between advisor's measurement and a plain loop? Each loop's
rate and minor page faults a step, for the baseline and a plan, in the same rounds.

    python -m experiments.heap_state CONFIG PLAN_JSON [--rounds 6]

A training step that frees its gradients at its end hands them back to the kernel when glibc's
trim threshold (moved by what the process freed before) lies under what sits free at the heap's
top; the next step faults every page in again. Which side of that line a process falls on is its
history's doing, so two loops running the same job can differ by a page fault a page of
gradients: this prints how often each does (the allocator recipe's fixed thresholds end it).
"""

import json
import statistics
import tempfile
from pathlib import Path

from advisor.config import load_config
from advisor.kinds import baseline_plan
from advisor.session import round_measures
from advisor.verify import paired_interval
from experiments.agreement import claim_arguments, rotated_rounds
from experiments.reproduce import plain_result


def main() -> None:
    args = claim_arguments(__doc__, 6)
    config_path = args.config.resolve()
    config, plan = load_config(config_path), json.loads(args.plan.read_text())
    measure, measure_reference = round_measures(config)
    faults: dict = {}

    def kept(name: tuple[str, str], rate: float, per_step: float) -> float:
        faults.setdefault(name, []).append(per_step)
        return rate

    def advisor(name: tuple[str, str], run) -> float:
        return kept(name, run.samples_per_s, run.page_faults_per_step)

    def plain(name: tuple[str, str], plan_file: Path) -> float:
        result = plain_result(config_path, plan_file)
        return kept(name, result["samples_per_s"], result["page_faults_per_step"])

    with tempfile.TemporaryDirectory() as folder:
        baseline_file, plan_file = Path(folder) / "baseline.json", Path(folder) / "plan.json"
        baseline_file.write_text("{}")
        plan_file.write_text(json.dumps(plan))
        rates = rotated_rounds({
            ("advisor", "baseline"): lambda: advisor(("advisor", "baseline"), measure_reference(baseline_plan(config))),
            ("plain", "baseline"): lambda: plain(("plain", "baseline"), baseline_file),
            ("advisor", "plan"): lambda: advisor(("advisor", "plan"), measure({**baseline_plan(config), **plan})),
            ("plain", "plan"): lambda: plain(("plain", "plan"), plan_file),
        }, args.rounds)
    for (loop, what), seen in faults.items():
        print(f"{loop:<8}{what:<9} {statistics.fmean(rates[(loop, what)]):8,.0f}/s   page faults a step: mean "
              f"{statistics.fmean(seen):7,.0f}, {min(seen):,.0f}-{max(seen):,.0f}")
    for what in ("baseline", "plan"):
        mid, low, high = paired_interval([a / p for a, p in zip(rates[("advisor", what)], rates[("plain", what)])])
        print(f"advisor / plain, {what}: {mid:.3f}x (95% {low:.3f}-{high:.3f}x)")


if __name__ == "__main__":
    main()
