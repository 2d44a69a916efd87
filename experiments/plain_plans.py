"""Which of several plans runs fastest as a user runs it? Each plan's rate in the plain loop
(experiments/plain_loop.py: a fresh process a run, the allocator's thresholds set in its
environment), beside the baseline's, in rounds whose order `agreement.round_order` balances; then
each plan's speedup over the baseline with its 95% interval, and its page faults a step.

    python -m experiments.plain_plans CONFIG PLANS_JSON [--rounds 4]

PLANS_JSON maps a name to a plan's keys that differ from the baseline, as a recommendation's
`plan` holds them: {"bf16 + allocator": {"amp.dtype": "bfloat16", "allocator.keep_mb": 1024}}.
What it answers: whether the plan advisor verified is the fastest of those a person would try by
hand, measured apart from advisor (torch.compile is left to a plan that names it: each run
compiles anew).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from advisor.verdict import paired_interval
from experiments.agreement import round_order
from experiments.reproduce import plain_result

BASELINE = "baseline"


def plan_speedups(rates: dict[str, list[float]]) -> dict[str, tuple[float, float, float]]:
    """Each plan's speedup over the baseline from rates taken in the same rounds: the geometric
    mean of the rounds' ratios and its 95% interval. A pure function."""
    return {name: paired_interval([rate / base for rate, base in zip(values, rates[BASELINE])])
            for name, values in rates.items() if name != BASELINE}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("plans", type=Path, help="JSON: {name: {plan key: value}}")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    plans = {BASELINE: {}, **json.loads(args.plans.read_text())}
    rates: dict[str, list[float]] = {name: [] for name in plans}
    faults: dict[str, list[float]] = {name: [] for name in plans}
    with tempfile.TemporaryDirectory() as folder:
        files = {}
        for index, (name, plan) in enumerate(plans.items()):
            files[name] = Path(folder) / f"plan-{index}.json"
            files[name].write_text(json.dumps(plan))
        for index in range(args.rounds):
            for name in round_order(list(plans), index):
                result = plain_result(args.config.resolve(), files[name])
                rates[name].append(result["samples_per_s"])
                faults[name].append(result["page_faults_per_step"])
            print(f"round {index + 1}/{args.rounds}: " + ", ".join(f"{name} {rates[name][-1]:,.0f}/s" for name in plans),
                  flush=True)
    print(f"{BASELINE}: {statistics.fmean(rates[BASELINE]):,.0f}/s, {statistics.fmean(faults[BASELINE]):,.0f} page faults a step")
    for name, (speedup, low, high) in sorted(plan_speedups(rates).items(), key=lambda item: -item[1][0]):
        print(f"{name}: {speedup:.2f}x ({low:.2f}-{high:.2f}x), {statistics.fmean(rates[name]):,.0f}/s, "
              f"{statistics.fmean(faults[name]):,.0f} page faults a step")


if __name__ == "__main__":
    main()
