"""`advisor schedule`: a re-tune installed in the user's crontab, one line per config."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

CRON_MARK = "# advisor retune"


def cron_line(config_path: str, schedule: str) -> str:
    from shlex import quote

    config = Path(config_path).resolve()
    log = config.parent / "advisor-retune.log"  # every path quoted: a folder named "a;b" stays one word
    return (f"{schedule} cd {quote(str(config.parent))} && {quote(sys.executable)} -m advisor.cli retune "
            f"{quote(str(config))} >> {quote(str(log))} 2>&1 {CRON_MARK} {config}")


def run_schedule(args: argparse.Namespace) -> int:
    import shutil
    import subprocess

    from advisor.errors import UserError
    from advisor.kinds import load_config

    load_config(args.config)  # a bad config is an error now, not at 3 a.m.
    if len(args.cron.split()) != 5:
        raise UserError(f"--cron: {args.cron!r} is not a 5-field cron schedule, e.g. \"0 3 * * *\"")
    line = cron_line(args.config, args.cron)
    if not (args.install or args.remove):
        print(line)
        return 0
    if shutil.which("crontab") is None:
        raise UserError("crontab is not installed; install cron, or add the line printed without --install yourself")
    listed = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    if listed.returncode != 0 and "no crontab" not in listed.stderr.lower():
        raise UserError(f"crontab -l failed ({listed.stderr.strip()[:200]}); the crontab was left as it is: "
                        "add the line printed without --install yourself")
    current = listed.stdout if listed.returncode == 0 else ""
    backup = Path(args.config).resolve().parent / "advisor-results" / f"crontab-before-{time.strftime('%Y%m%d-%H%M%S')}.txt"
    backup.parent.mkdir(parents=True, exist_ok=True)
    backup.write_text(current)
    marker = line[line.index(CRON_MARK):]
    kept = [entry for entry in current.splitlines() if not entry.endswith(marker)]
    lines = kept if args.remove else kept + [line]
    subprocess.run(["crontab", "-"], input="\n".join(lines) + "\n", text=True, check=True)
    print(("removed: " if args.remove else "installed: ") + line)
    print(f"the crontab as it was is kept in {backup}")
    return 0
