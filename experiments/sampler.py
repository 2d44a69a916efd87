"""What advisor's memory sampler costs the run it watches.

    python -m experiments.sampler [CONFIG] [PLAN_JSON] [--rounds 10]

Measures a plan (default: fetch_stall's 4 DataLoader workers, persistent) as a verification
round does (`round_measures`: a new interpreter, the sampler watching from the parent) with the
tree's PSS read every second as the sampler once did, and as it does now (only where the summed
RSS cannot rule out the limit), and in the plain loop (experiments/plain_loop.py), order
alternated round by round. Prints each way's mean rate, its run-to-run spread and its slowest
run, and the first two's ratio paired by round.
"""

import argparse
import json
import math
import statistics
import tempfile
from pathlib import Path

import advisor.measure
from advisor.kinds import baseline_plan, load_config
from advisor.session import round_measures
from advisor.verdict import paired_interval
from experiments import config_path
from experiments.reproduce import plain_run

ROOT = Path(__file__).resolve().parent.parent
FOUR_WORKERS = {"dataloader.num_workers": 4, "dataloader.persistent_workers": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", type=Path, default=config_path("fetch_stall"))
    parser.add_argument("plan", nargs="?", type=Path, help="a JSON object of the plan's knobs (default: 4 workers)")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    config = load_config(args.config.resolve())
    knobs = json.loads(args.plan.read_text()) if args.plan else FOUR_WORKERS
    plan = {**baseline_plan(config), **knobs}
    measure, _ = round_measures(config)
    as_needed = advisor.measure.pss_needed
    every_second = lambda reading, limit_mb: True  # noqa: E731
    rates: dict[str, list[float]] = {"PSS every second": [], "PSS as needed": [], "plain loop": []}
    with tempfile.TemporaryDirectory() as folder:
        plan_file = Path(folder) / "plan.json"
        plan_file.write_text(json.dumps(knobs))
        for index in range(args.rounds):
            for name in (list(rates) if index % 2 == 0 else list(rates)[::-1]):
                if name == "plain loop":
                    rates[name].append(plain_run(config.path, plan_file))
                    continue
                advisor.measure.pss_needed = every_second if name == "PSS every second" else as_needed
                rates[name].append(measure(plan).samples_per_s)
            advisor.measure.pss_needed = as_needed
            print(f"round {index + 1}/{args.rounds}: " + ", ".join(f"{name} {r[-1]:,.0f}/s" for name, r in rates.items()),
                  flush=True)
    for name, values in rates.items():
        print(f"{name:<17} mean {statistics.fmean(values):,.0f}/s, spread {statistics.pstdev(values) / statistics.fmean(values):.0%}, "
              f"slowest {min(values):,.0f}/s")
    ratios = [a / b for a, b in zip(rates["PSS every second"], rates["PSS as needed"]) if a > 0 and b > 0]
    mid, low, high = paired_interval(ratios)
    print(f"PSS every second / as needed, paired by round: {mid:.3f}x (95% {low:.3f}-{high:.3f}x); "
          f"slowest pair {min(ratios):.2f}x; log-ratio sd {statistics.pstdev(map(math.log, ratios)):.2f}")


if __name__ == "__main__":
    main()
