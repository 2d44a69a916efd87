"""Each verification round a session kept in its study, arm by arm: what a round measured and how
each run started, to find a round unlike the others.

    python -m experiments.round_table JOURNAL_OR_URL [STUDY]

Reads the study's `verification_round:<arms>:<index>` attributes (`session.kept_rounds`) and
prints, per verification and round, each arm's rate, step p50, data wait share, minor page faults
a step, other processes' CPU share and the way its process started (`Measurement.interpreter`);
then, per arm, its first round's rate over the median of its later ones.
"""

from __future__ import annotations

import argparse
import re
import statistics

import optuna

from advisor.search.storage import open_storage
from advisor.session.kept_rounds import ROUND_ATTR

ROUND_KEY = re.compile(rf"^{ROUND_ATTR}:(\w+):(\d+)$")


def rounds_by_verification(attrs: dict) -> dict[str, list[dict]]:
    """Each verification's rounds in order, as stored: {arms key: [{arm: run dict}, ...]}."""
    found: dict[str, dict[int, dict]] = {}
    for name, runs in attrs.items():
        if match := ROUND_KEY.match(name):
            found.setdefault(match.group(1), {})[int(match.group(2))] = runs
    return {key: [rounds[i] for i in sorted(rounds)] for key, rounds in found.items()}


def run_line(arm: str, run: dict) -> str:
    return (f"  {arm:>10} {run.get('samples_per_s', 0):9,.0f}/s  p50 {run.get('step_ms_p50', 0):6.1f} ms  "
            f"wait {run.get('data_wait_share', 0):4.0%}  faults/step {run.get('page_faults_per_step', 0):7,.0f}  "
            f"other cpu {run.get('other_cpu_share', 0):5.1%}  {run.get('interpreter', '')}")


def first_over_later(rounds: list[dict]) -> dict[str, float]:
    """Per arm: its first round's rate over the median of its later rounds' (1.0: like the rest)."""
    ratios = {}
    for arm in rounds[0]:
        later = [r[arm]["samples_per_s"] for r in rounds[1:] if arm in r and r[arm].get("samples_per_s")]
        if later and rounds[0][arm].get("samples_per_s"):
            ratios[arm] = rounds[0][arm]["samples_per_s"] / statistics.median(later)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("storage", help="the study's journal file or database URL")
    parser.add_argument("study", nargs="?", help="the study's name (default: the storage's only one)")
    args = parser.parse_args()
    storage = open_storage(args.storage)
    name = args.study or optuna.get_all_study_names(storage)[0]
    study = optuna.load_study(study_name=name, storage=storage)
    for key, rounds in rounds_by_verification(study.user_attrs).items():
        print(f"verification {key}: {len(rounds)} round(s)")
        for index, runs in enumerate(rounds, start=1):
            print(f" round {index}")
            for arm, run in runs.items():
                print(run_line(arm, run))
        ratios = first_over_later(rounds)
        print("  first round / median of later: " + ", ".join(f"{arm} {ratio:.2f}" for arm, ratio in ratios.items()))


if __name__ == "__main__":
    main()
