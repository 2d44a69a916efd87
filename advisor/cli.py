"""The `advisor` command. It only orchestrates: each stage lives in its own module."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional

from advisor.errors import UserError


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.command(args)
    except UserError as exc:
        print(f"advisor: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("advisor: interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="advisor", description=__doc__)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    diagnose = commands.add_parser("diagnose", help="measure the job and name its bottleneck with evidence")
    diagnose.add_argument("config", help="path of the YAML config")
    diagnose.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    diagnose.set_defaults(command=run_diagnose)
    return parser


def progress_printer(enabled: bool = True):
    def progress(line: str) -> None:
        if enabled:
            print(line, file=sys.stderr, flush=True)

    return progress


def run_diagnose(args: argparse.Namespace) -> int:
    from advisor.config import load_config
    from advisor.diagnose import diagnose
    from advisor.evidence import collect_evidence
    from advisor.report import render_diagnosis

    config = load_config(args.config)
    evidence = collect_evidence(config, progress_printer())
    diagnoses = diagnose(evidence)
    if args.json:
        payload = {
            "workload": config.name,
            "bottleneck": diagnoses[0].bottleneck if diagnoses else None,
            "diagnoses": [d.to_dict() for d in diagnoses],
            "evidence": evidence.to_dict(),
        }
        print(json.dumps(payload, indent=2))
    else:
        print(render_diagnosis(config.name, evidence, diagnoses))
    return 0 if evidence.full.ok else 1


if __name__ == "__main__":
    sys.exit(main())
