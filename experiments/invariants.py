"""What a restructuring must leave as it was: for each reference config with stored evidence,
the baseline plan, the session's facts (recipes chosen, the space, the study's attributes) and
the first trials the study hands out, hashed. Nothing is measured: the evidence is the stored
diagnosis (`tests/fixtures/evidence`), the study a journal in a temporary folder.

    python experiments/invariants.py            # one line per config: its digest, then every part's
    python experiments/invariants.py --show quickstart   # the parts themselves

Run it on two checkouts (`git worktree add /tmp/before REV`) and compare the lines.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.evidence import Evidence  # noqa: E402

try:  # the kinds' registry reads configs
    from advisor.kinds import parse_config
except ImportError:  # before the kinds were packages
    from advisor.kinds import parse_config

from advisor.session.planning import plan_or_resume  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "evidence"
FIRST_TRIALS = 8  # the enqueued ones, then the sampler's


def config_of(name: str) -> Path:
    for folder in (ROOT / "experiments" / "configs", ROOT / "configs"):
        if (folder / f"{name}.yaml").exists():
            return folder / f"{name}.yaml"
    raise SystemExit(f"no config named {name}")


def parts_of(name: str, scratch: Path) -> dict:
    """The parts that must not move, for one reference config."""
    path = config_of(name)
    raw = yaml.safe_load(path.read_text())
    raw.setdefault("search", {})["storage"] = str(scratch / f"{name}.optuna-journal")
    config = parse_config(raw, path.resolve())
    evidence = Evidence.from_dict(json.loads((FIXTURES / f"{name}.json").read_text()))
    study, facts, diagnoses, _ = plan_or_resume(config, evidence, (), lambda line: None)
    parts = {
        "diagnoses": [(d.bottleneck, d.severity, d.fixes) for d in diagnoses],
        "chosen": list(facts.chosen),
        "baseline": json.dumps(facts.baseline, sort_keys=True, default=str),
        "space": json.dumps({key: repr(param) for key, param in facts.space.items()}),
    }
    if study is None:
        return parts
    attrs = {key: value for key, value in study.user_attrs.items() if key not in ("session",)}
    parts["attrs"] = json.dumps(attrs, sort_keys=True, default=str)
    from advisor.search import suggest

    first = []
    for _ in range(FIRST_TRIALS):
        trial = study.ask()
        plan = {**facts.baseline, **suggest(trial, facts.space)}
        first.append(json.dumps(plan, sort_keys=True, default=str))
        study.tell(trial, 1.0 + len(first) / 100)
    parts["first_trials"] = first
    return parts


def digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:10]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", help="print the parts of this config")
    args = parser.parse_args()
    names = sorted(path.stem for path in FIXTURES.glob("*.json"))
    scratch = Path(tempfile.mkdtemp(prefix="invariants-"))
    try:
        for name in [args.show] if args.show else names:
            parts = parts_of(name, scratch)
            if args.show:
                print(json.dumps(parts, indent=1, default=str))
                continue
            each = " ".join(f"{key}={digest(value)}" for key, value in parts.items())
            print(f"{name:<16} {digest(parts)}  {each}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
