"""The same config optimized several times afresh: how often its fix is verified.

    python -m experiments.sessions [CONFIG] [--sessions 5]

Each session is a fresh `advisor optimize --fresh` of CONFIG (default: serve_encoder, whose p95
over 100 requests a run rests on its 5 slowest), run one after another; one line per session:
its first recommendation, verified or not, its speedup, interval and rounds, and at the end how
many sessions verified a fix. The results folders are kept under CONFIG's advisor-results.
"""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from experiments import config_path

ROOT = Path(__file__).resolve().parent.parent


def one_session(config: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "advisor.cli", "optimize", str(config), "--fresh"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    found = re.search(r"results: (\S+)", done.stdout)
    if done.returncode != 0 or not found:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    payload = json.loads((Path(found.group(1)) / "recommendations.json").read_text())
    recommendations = payload["recommendations"]
    return recommendations[0] if recommendations else {"error": "no candidate to verify"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default=str(config_path("serve_encoder")))
    parser.add_argument("--sessions", type=int, default=5)
    args = parser.parse_args()
    verified = 0
    for number in range(1, args.sessions + 1):
        top = one_session(Path(args.config).resolve())
        if "error" in top:
            print(f"session {number}: {top['error']}", flush=True)
            continue
        verified += top["verified"]
        low, high = top["interval"]
        print(f"session {number}: {'+'.join(top['recipes'])} {top['speedup']:.2f}x ({low:.2f}-{high:.2f}x), "
              f"{top.get('rounds', '?')} rounds, {'verified' if top['verified'] else 'not verified: ' + top['reason']}",
              flush=True)
    print(f"verified in {verified} of {args.sessions} sessions")


if __name__ == "__main__":
    main()
