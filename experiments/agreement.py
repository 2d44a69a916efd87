"""Does advisor's measurement flatter a plan against a plain loop, or do the two differ only by
noise? Both loops in the same rounds, so the machine's drift cancels out of their comparison.

    python -m experiments.agreement CONFIG PLAN_JSON [--rounds 8]

Each round runs four fresh processes, order rotated: the baseline and the plan as a verification
round measures them (`round_measures`: advisor's child in a new interpreter, the reference
uncapped), and the baseline and the plan in the plain loop (experiments/plain_loop.py). Prints
each loop's speedup (geometric mean of the rounds' ratios, 95% interval), and the ratio of the
two speedups round by round: an interval that holds 1.0 says the loops agree, and a claim's
distance from a plain re-measurement made later is the machine's drift and the rounds' noise;
one clear of 1.0 is a bias to find. The benchmark suite's reproduction column runs the same
rounds (`same_rounds`).
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Callable, Optional

from advisor.kinds import baseline_plan, load_config
from advisor.session import round_measures
from advisor.verdict import paired_interval
from experiments.reproduce import plain_run

LOOPS = ("advisor", "plain")


def same_rounds(config_path: Path, plan: dict, rounds: int,
                progress: Callable[[str], None] = print) -> dict[tuple[str, str], list[float]]:
    """The rates of the baseline and `plan` in advisor's measurement and in the plain loop,
    `rounds` rounds of four fresh processes, order rotated: {(loop, "baseline" | "plan"): rates}."""
    config = load_config(config_path)
    full_plan = {**baseline_plan(config), **plan}
    measure, measure_reference = round_measures(config)
    with tempfile.TemporaryDirectory() as folder:
        baseline_file, plan_file = Path(folder) / "baseline.json", Path(folder) / "plan.json"
        baseline_file.write_text("{}")
        plan_file.write_text(json.dumps(plan))
        runs = {
            ("advisor", "baseline"): lambda: measure_reference(baseline_plan(config)).samples_per_s,
            ("advisor", "plan"): lambda: measure(full_plan).samples_per_s,
            ("plain", "baseline"): lambda: plain_run(config_path, baseline_file),
            ("plain", "plan"): lambda: plain_run(config_path, plan_file),
        }
        return rotated_rounds(runs, rounds, progress)


def rotated_rounds(runs: dict[tuple[str, str], Callable[[], float]], rounds: int,
                   progress: Callable[[str], None] = print) -> dict[tuple[str, str], list[float]]:
    """Each of `runs` ({(loop, "baseline" | "plan"): a run's rate}) once a round, `rounds` rounds,
    in `round_order`; the rates by run."""
    names = list(runs)
    rates: dict = {name: [] for name in names}
    for index in range(rounds):
        for name in round_order(names, index):
            rates[name].append(runs[name]())
        progress(f"round {index + 1}/{rounds}: " + ", ".join(f"{loop} {what} {rates[(loop, what)][-1]:,.0f}/s"
                                                            for loop, what in names))
    return rates


def round_order(names: list, index: int) -> list:
    """Round `index`'s order: rotated every second round, and reversed in odd rounds, so that over
    each pair of rounds every run comes before every other once. A plain rotation of four runs
    puts advisor's baseline ahead of its plan in 3 rounds of 4, and the first run after a batch of
    new interpreters reads slow (docs/benchmarks.md, 2026-12-04 evening). A pure function."""
    shift = (index // 2) % len(names)
    rotated = names[shift:] + names[:shift]
    return rotated[::-1] if index % 2 else rotated


def per_round(rates: dict[tuple[str, str], list[float]], loop: str) -> list[Optional[float]]:
    """One loop's ratio of the plan to the baseline in each round; None where a run failed (read 0)."""
    return [p / b if p > 0 and b > 0 else None for p, b in zip(rates[(loop, "plan")], rates[(loop, "baseline")])]


def speedups(rates: dict[tuple[str, str], list[float]]) -> dict[str, list[float]]:
    """Each loop's ratios of the plan to the baseline, over its rounds without a failed run."""
    return {loop: [r for r in per_round(rates, loop) if r is not None] for loop in LOOPS}


def loops_ratio(rates: dict[tuple[str, str], list[float]], first: str = "advisor",
                second: str = "plain") -> tuple[float, float, float]:
    """`first`'s speedup over `second`'s (advisor's over the plain loop's), paired round by round
    (rounds where both ran), with its 95% interval."""
    paired = [a / p for a, p in zip(per_round(rates, first), per_round(rates, second)) if a and p]
    return paired_interval(paired) if paired else (float("nan"),) * 3


def claim_arguments(doc: str, rounds: int) -> argparse.Namespace:
    """CONFIG PLAN_JSON [--rounds N]: a reference and a claim's plan, as the loop checks take them."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("plan", type=Path, help="a JSON object of the plan's knobs (a claim's `plan`)")
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser.parse_args()


def main() -> None:
    args = claim_arguments(__doc__, 8)
    rates = same_rounds(args.config.resolve(), json.loads(args.plan.read_text()), args.rounds)
    for loop, ratios in speedups(rates).items():
        mid, low, high = paired_interval(ratios)
        base = rates[(loop, "baseline")]
        print(f"{loop:<8} speedup {mid:.2f}x (95% {low:.2f}-{high:.2f}x); "
              f"its baseline's run-to-run spread {statistics.pstdev(base) / statistics.fmean(base):.0%}")
    mid, low, high = loops_ratio(rates)
    print(f"advisor / plain, round by round: {mid:.3f}x (95% {low:.3f}-{high:.3f}x): "
          + ("the loops agree within the rounds' noise" if low <= 1.0 <= high else "a bias, not noise"))


if __name__ == "__main__":
    main()
