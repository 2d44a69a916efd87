"""Why verification rounds start fresh interpreters: runs forked from one template process share
its draw of the memory layout, and a job's speed can hang on that draw.

    python -m experiments.layout [cnn|lm] [--sessions 4] [--rounds 4] [--plan JSON]

For a script reference (configs/train.py, experiments/workloads/scripts; default lm with bf16 and the allocator,
its verified #1), each "session" is a new Python process that measures `--rounds` interleaved
pairs (the baseline, then the plan) two ways: forked from that process's template, as trials
are, and each run in a new interpreter, as verification rounds are. Then the same number of
plain pairs: the script run by hand, the plan applied by hand (`experiments.scripts.by_hand`).
Prints each session's ratios and their geometric mean for both ways, then the plain pairs.
Forked sessions agree within themselves and disagree with each other: each is one draw.
Fresh rounds vary within a session as plain runs do, and center where the plain runs center.
"""

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from experiments.scripts import REFERENCES, ROOT, SCRIPTS, by_hand, environment_of, plain_rate

DEFAULT_PLANS = {"lm": {"amp.dtype": "bfloat16", "allocator.keep_mb": 1024},
                 "cnn": {"dataloader.num_workers": 4, "dataloader.persistent_workers": True}}


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def one_session(config_path: str, plan: dict, rounds: int) -> None:
    """Runs in its own process: `rounds` forked pairs, then `rounds` fresh ones; prints JSON."""
    from advisor.kinds import baseline_plan, load_config
    from advisor.session import measure_with

    config = load_config(Path(config_path))
    baseline = baseline_plan(config)
    ratios = {}
    for way, fresh in (("forked", False), ("fresh", True)):
        measure = measure_with(config, capped=False, fresh=fresh)
        ratios[way] = []
        for _ in range(rounds):
            base, fixed = measure(baseline), measure({**baseline, **plan})
            ratios[way].append(fixed.samples_per_s / base.samples_per_s)
    print(json.dumps(ratios))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", default="lm", choices=sorted(REFERENCES))
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--plan", help="the plan's changes as JSON (default: the reference's verified #1)")
    parser.add_argument("--one-session", help=argparse.SUPPRESS)  # a config path: run one session here
    args = parser.parse_args()
    plan = json.loads(args.plan) if args.plan else DEFAULT_PLANS[args.name]
    if args.one_session:
        return one_session(args.one_session, plan, args.rounds)

    reference = REFERENCES[args.name]
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        for file in (reference.script, *reference.files):
            shutil.copy(SCRIPTS / file, folder / file)
        config = folder / "advisor.yaml"
        config.write_text(json.dumps({"name": f"layout_{args.name}", "workload": {
            "kind": "script", "script": reference.script, "args": list(reference.args)}}))
        print(f"{args.name}: {plan} against the script as it is, {args.rounds} pairs a way, {args.sessions} sessions")
        means = {"forked": [], "fresh": []}
        for session in range(1, args.sessions + 1):
            output = subprocess.run([sys.executable, "-m", "experiments.layout", args.name, "--plan", json.dumps(plan),
                                     "--rounds", str(args.rounds), "--one-session", str(config)],
                                    cwd=ROOT, capture_output=True, text=True, check=True).stdout
            ratios = json.loads(output.strip().splitlines()[-1])
            for way, values in ratios.items():
                means[way].append(geomean(values))
                print(f"session {session} {way:>6}: {' '.join(f'{v:.2f}' for v in values)}  mean {means[way][-1]:.2f}x",
                      flush=True)
        edited = "edited_" + reference.script
        (folder / edited).write_text(by_hand((folder / reference.script).read_text(), plan, reference))
        plain = []
        for _ in range(args.rounds * args.sessions):
            base = plain_rate(folder, reference.script, reference.plain_args, {})
            plain.append(plain_rate(folder, edited, reference.plain_args, environment_of(plan)) / base)
        print(f"plain runs: {' '.join(f'{v:.2f}' for v in plain)}  mean {geomean(plain):.2f}x")
        for way, values in means.items():
            print(f"{way:>6} sessions' means: {min(values):.2f}x to {max(values):.2f}x "
                  f"(spread {max(values) / min(values) - 1:.0%}); all rounds {geomean(values):.2f}x, "
                  f"plain {geomean(plain):.2f}x")


if __name__ == "__main__":
    main()
