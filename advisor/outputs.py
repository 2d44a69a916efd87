"""Where a plan's kept outputs go: one file per plan, in advisor's own folder beside the config.

A leaf: the kinds write here and the numerics gate reads from here, and nothing outside this
folder is ever read back (paths come back from the study, which others may write).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from advisor.config import AdvisorConfig
from advisor.plan import plan_key


def outputs_folder(config: AdvisorConfig) -> Path:
    return config.root / "advisor-cache" / config.name / "outputs"


def output_path(config: AdvisorConfig, plan: dict, suffix: str) -> Path:
    """Where a plan's kept output goes: one file per plan (its runs agree), in advisor's own folder."""
    folder = outputs_folder(config)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{hashlib.sha256(plan_key(plan).encode()).hexdigest()[:16]}{suffix}"


def own_output(config: AdvisorConfig, path: Optional[str]) -> bool:
    """Whether a kept output lies in advisor's own outputs folder (nothing outside it is ever unpickled)."""
    if not path:
        return True  # no output: the comparison says so
    return Path(path).resolve().parent == outputs_folder(config).resolve()


def write_whole(path: Path, text: str) -> None:
    """Writes a results file whole or not at all: into a temporary file beside it, then renamed
    over it. A full disk leaves the last complete version (or none), never a truncated one."""
    import os

    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(text)
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)
        raise
