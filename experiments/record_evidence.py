"""Records the evidence of every reference workload as JSON, for the fast diagnosis tests.

    python -m experiments.record_evidence [--out tests/fixtures/evidence]

The unit tests diagnose these stored measurements without running anything, so a change to a
threshold or a rule is checked against real numbers from this machine in milliseconds.
"""

import argparse
import json
import sys
from pathlib import Path

from advisor.diagnosis import collect_evidence
from advisor.kinds import load_config
from experiments import config_path

ROOT = Path(__file__).resolve().parent.parent
REFERENCES = ("quickstart", "fetch_stall", "prep_stall", "compute_bound", "memory_budget", "overhead")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "evidence")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in REFERENCES:
        config = load_config(config_path(name))
        evidence = collect_evidence(config, lambda line: print(f"{name}: {line}", file=sys.stderr))
        (args.out / f"{name}.json").write_text(json.dumps(evidence.to_dict(), indent=1))


if __name__ == "__main__":
    main()
