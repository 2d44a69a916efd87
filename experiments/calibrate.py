"""The verifier's false-verification rate, live: the baseline against itself, 20 times.

    python -m experiments.calibrate [configs/overhead.yaml] [--repeats 20] [--pairs 5]

Each repeat is a full verification as `advisor optimize` runs it (pairs of interleaved fresh
child runs, paired ratios, bootstrap interval against `search.min_speedup`), of the baseline
plan against the same plan. A sound verifier verifies at most about 1 in 20.
"""

import argparse
from typing import Callable

from advisor.config import AdvisorConfig, load_config
from advisor.plan import baseline_plan
from advisor.session import measure_with
from advisor.verify import Verdict, interleave, judge


def aa_verdicts(config: AdvisorConfig, repeats: int, pairs: int,
                progress: Callable[[str], None] = print) -> list[Verdict]:
    """`repeats` verifications of the baseline plan against itself."""
    plan, measure = baseline_plan(config), measure_with(config)
    verdicts = []
    for repeat in range(1, repeats + 1):
        rounds = interleave(plan, {"A'": plan}, measure, pairs)
        verdict = judge("A/A", rounds.ratios("A'"), config.search.min_speedup)
        verdicts.append(verdict)
        progress(f"A/A repeat {repeat:2d}/{repeats}: {verdict.speedup:.3f}x  95% {verdict.low:.3f}-{verdict.high:.3f}x  "
                 f"{'VERIFIED' if verdict.verified else 'not verified'}")
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="configs/overhead.yaml")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    config = load_config(args.config)
    print(f"A/A on {config.name}: {args.repeats} verifications of {args.pairs} pairs, min_speedup {config.search.min_speedup}")
    verdicts = aa_verdicts(config, args.repeats, args.pairs)
    print(f"false verifications: {sum(v.verified for v in verdicts)} of {args.repeats}")


if __name__ == "__main__":
    main()
