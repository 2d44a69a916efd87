"""Do runs forked from their round's template measure what runs in new interpreters measure, and
what the plain loop measures? Verification rounds fork each run from a new interpreter of the
round's own (`advisor.harness.templates`); before that, each run started a new interpreter.

    python -m experiments.template_rounds CONFIG PLAN_JSON [--rounds 12] [--ways template,ahead,fresh,plain]

Each round runs the baseline and the plan each way, the ways' order rotating round by round and
the arms' order every second round: "template", both forked from one new template (a session's
round); "ahead", each in a new interpreter started ahead (`launch.ready_interpreter`, a batch at
once, as rounds ran before); "fresh", each in a new interpreter started for it, alone (as a
user's own `python` is); "plain", each in the plain loop (experiments/plain_loop.py, which runs
builders' jobs, not a job's own step: leave it out of `--ways` there). Prints each round's rates,
then per way the arms' geometric means and the speedup with its 95% interval; then, pair by pair,
the template's rates over the new interpreters' and each way's speedup over another's. An
interval of the speedups' ratio that holds 1.0 says the ways agree; the arms' own ratios show a
shift of level that cancels in the speedup.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from pathlib import Path

from advisor.verdict import paired_interval
from experiments.reproduce import plain_run

WAYS = ("template", "ahead", "fresh", "plain")


def main() -> None:
    from advisor.harness import kept, launch
    from advisor.kinds import baseline_plan, kind_of, load_config
    from advisor.session import measure_with

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("plan", help="the plan's changes, as JSON")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--ways", default=",".join(WAYS), help="comma-separated, of: " + ", ".join(WAYS))
    args = parser.parse_args()
    ways = tuple(way for way in WAYS if way in args.ways.split(","))
    config_path = args.config.resolve()
    config = load_config(config_path)
    launch.use_preload(kind_of(config).preload)  # the imports a session's interpreters make
    changes = json.loads(args.plan)
    plans = {"baseline": baseline_plan(config), "plan": {**baseline_plan(config), **changes}}
    starts = {"template": "template", "ahead": "ahead", "fresh": True}
    measures = {way: (measure_with(config, capped=False, fresh=start), measure_with(config, fresh=start))
                for way, start in starts.items()}
    rates: dict[tuple[str, str], list[float]] = {(way, arm): [] for way in ways for arm in plans}
    with tempfile.TemporaryDirectory() as folder:
        files = {"baseline": Path(folder) / "baseline.json", "plan": Path(folder) / "plan.json"}
        files["baseline"].write_text("{}")
        files["plan"].write_text(json.dumps(changes))
        try:
            for index in range(args.rounds):
                shift = index % len(ways)
                arms = list(plans) if (index // 2) % 2 == 0 else list(reversed(plans))
                for way in ways[shift:] + ways[:shift]:
                    for arm in arms:
                        if way == "plain":
                            rate = plain_run(config_path, files[arm])
                        else:
                            reference, candidate = measures[way]
                            rate = (reference if arm == "baseline" else candidate)(plans[arm]).samples_per_s
                        rates[(way, arm)].append(rate)
                print(f"round {index + 1}/{args.rounds}: " + ", ".join(
                    f"{way} {arm} {rates[(way, arm)][-1]:,.0f}/s" for way in ways for arm in plans), flush=True)
        finally:
            kept.close_all()
    report(rates, ways)


def report(rates: dict[tuple[str, str], list[float]], ways: tuple[str, ...]) -> None:
    speedups = {way: [p / b for p, b in zip(rates[(way, "plan")], rates[(way, "baseline")])] for way in ways}
    for way in ways:
        speedup, low, high = paired_interval(speedups[way])
        spread = statistics.stdev(math.log(r) for r in speedups[way])
        print(f"{way:>8}: baseline {geomean(rates[(way, 'baseline')]):8,.1f}/s, plan {geomean(rates[(way, 'plan')]):8,.1f}/s, "
              f"speedup {speedup:.3f}x ({low:.3f}-{high:.3f}x), sd of its log {spread:.3f}")
    for arm in ("baseline", "plan") if {"template", "ahead"} <= set(ways) else ():
        ratio = [t / a for t, a in zip(rates[("template", arm)], rates[("ahead", arm)])]
        print(f"template / ahead, the {arm}'s rate: {'%.3fx (%.3f-%.3fx)' % paired_interval(ratio)}")
    pairs = [(first, second) for index, first in enumerate(WAYS) for second in WAYS[index + 1:]]
    for first, second in (pair for pair in pairs if set(pair) <= set(ways)):
        ratio = [x / y for x, y in zip(speedups[first], speedups[second])]
        print(f"{first} / {second}, speedup: {'%.3fx (%.3f-%.3fx)' % paired_interval(ratio)}")


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


if __name__ == "__main__":
    main()
