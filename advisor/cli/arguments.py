"""What a command's arguments name: the config file, or the script's command line after `--`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional

from advisor.errors import UserError


def config_argument(args: argparse.Namespace, script_command: Optional[list[str]]) -> tuple[Any, str]:
    """The config the command runs on, and how to name it in the lines it prints: the config
    file's path as given, or, for `-- python SCRIPT ARGS`, a `kind: script` config rooted in the
    working folder (no file is written: the measurement children get it pickled)."""
    import shlex

    if script_command is None:
        if args.config is None:
            raise UserError(f"{args.name}: pass the path of a YAML config, or the script's command line after --: "
                            f"advisor {args.name} -- python train.py ARGS")
        return args.config, args.config
    if args.config is not None or args.name not in SCRIPT_COMMANDS:
        raise UserError(f"{args.name}: takes a config or, after --, a script's command line, not both"
                        if args.config is not None else
                        f"{args.name}: needs a config file; write one with workload.kind: script")
    from advisor.kinds import script_config

    return script_config(script_command, Path.cwd()), shlex.join(["--", *script_command])


def config_of(args: argparse.Namespace):
    """The command's config, read and validated; `--trials` and `--time-budget` override its search."""
    import dataclasses

    from advisor.kinds import load_config

    config = load_config(args.config) if isinstance(args.config, str) else args.config
    overrides = {key: value for key, value in (("trials", getattr(args, "trials", None)),
                                               ("time_budget_s", getattr(args, "time_budget", None))) if value is not None}
    return dataclasses.replace(config, search=dataclasses.replace(config.search, **overrides)) if overrides else config


SCRIPT_COMMANDS = ("diagnose", "optimize", "report", "retune", "ui", "worker")  # those a script's command line can name


def split_script_command(argv: list[str]) -> tuple[list[str], Optional[list[str]]]:
    """`advisor optimize -- python train.py --epochs 1`: advisor's own arguments, and the
    command line after `--` (None without one)."""
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]
