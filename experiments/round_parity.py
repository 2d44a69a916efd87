"""Does a session's early verification read its fix differently in odd rounds (a new template pair
imported just before, the baseline first) and even ones (the pair's second template, the fix
first), and does a claim stopped at three rounds (two odd, one even) read high or low for it?

    python -m experiments.round_parity LOG [LOG ...]

Reads the logs `experiments.first_fix --logs DIR` keeps (or any session's output): each one's
first verification's rounds ("round 2/5: baseline 608/s, #1 1,696/s"). Prints the fix's speedup
over the odd rounds and over the even ones, their ratio with the standard error of its log, and,
over the sessions that ran more than three rounds, how far the first three rounds' mean lay from
all of the session's rounds.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
from pathlib import Path

VERIFYING = re.compile(r"^\s*(?:[0-9.]+ )?verifying \d+ candidate")
ROUND = re.compile(r"round (\d+)/\d+: baseline ([\d,.]+)/s, #\d+ ([\d,.]+)/s")


def first_verification(lines: list[str]) -> list[tuple[int, float]]:
    """(round number, the log of the fix's rate over the baseline's) for each round of the first
    verification in a session's output; [] where it has none. A pure function."""
    rounds, seen = [], 0
    for line in lines:
        if VERIFYING.match(line):
            seen += 1
            if seen > 1:
                break
            continue
        found = ROUND.search(line) if seen == 1 else None
        if found:
            baseline, fix = (float(found.group(i).replace(",", "")) for i in (2, 3))
            rounds.append((int(found.group(1)), math.log(fix / baseline)))
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path)
    args = parser.parse_args()
    sessions = [first_verification(log.read_text().splitlines()) for log in args.logs]
    odd = [value for rounds in sessions for number, value in rounds if number % 2]
    even = [value for rounds in sessions for number, value in rounds if not number % 2]
    if len(odd) < 2 or len(even) < 2:
        raise SystemExit("round_parity: fewer than two odd and two even rounds in these logs")
    error = math.sqrt(statistics.variance(odd) / len(odd) + statistics.variance(even) / len(even))
    print(f"{len(sessions)} sessions: odd rounds {math.exp(statistics.fmean(odd)):.3f}x ({len(odd)}), even rounds "
          f"{math.exp(statistics.fmean(even)):.3f}x ({len(even)}); odd / even "
          f"{math.exp(statistics.fmean(odd) - statistics.fmean(even)):.3f} (standard error of its log {error:.3f})")
    longer = [rounds for rounds in sessions if len(rounds) > 3]
    if longer:
        shift = statistics.fmean(statistics.fmean(v for _, v in rounds[:3]) - statistics.fmean(v for _, v in rounds)
                                 for rounds in longer)
        print(f"the first three rounds against all of a session's, over {len(longer)} sessions: {math.exp(shift) - 1:+.1%}")


if __name__ == "__main__":
    main()
