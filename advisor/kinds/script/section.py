"""`workload: {kind: script}`: an unmodified training script, and the config that
`advisor optimize -- python train.py` makes of its command line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

from advisor.config import Invalid, WorkloadSection, checked, positive
from advisor.errors import ConfigError


@dataclass(frozen=True)
class ScriptWorkload(WorkloadSection):
    """An unmodified training script, run as `python SCRIPT ARGS` would run it: advisor finds its
    steps (each backward of a scalar loss), times them, and applies plans from outside its code."""

    script: str = checked((lambda v: v.endswith(".py"), "the path of a Python file (train.py)"))  # run from the config's folder
    # enough training to pass the warm-up and the timed window
    args: Any = checked((lambda v: isinstance(v, list) and all(isinstance(a, (str, int, float)) for a in v),
                        "a list of the script's command-line arguments ([--epochs, '1'])"), default_factory=list)
    kind: Literal["script"] = "script"  # your training script, unmodified
    RECIPES: ClassVar[str] = "script"
    SANDBOXED: ClassVar[bool] = True  # run in a copy of the machine (`advisor.harness.sandbox`)
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA where there is a GPU
    threads: Optional[int] = checked(positive, default=None)  # torch.set_num_threads, if your script sets it

    def run_child(self, config, spec: dict) -> dict:
        from advisor.kinds.script.child import run_script

        return run_script(config, spec)

    def check(self, root: Path) -> None:
        if not (root / self.script).is_file():
            raise Invalid("workload.script", f"{self.script} not found (relative to the config's folder "
                                             f"{root}); name the training script to run")


PYTHON_COMMAND = re.compile(r"^python[0-9.]*$")


def script_command(command: list[str], folder: Path) -> tuple[str, dict]:
    """`python SCRIPT ARGS` (or `SCRIPT ARGS`), run from `folder`: the name and the raw config of
    a `kind: script` job rooted there (the study, the store and the results go where a config
    file there would put them)."""
    words = command[1:] if command and PYTHON_COMMAND.match(Path(command[0]).name) else list(command)
    if not words or words[0].startswith("-") or not words[0].endswith(".py"):
        raise ConfigError(f"after --: expected a script's command line, python SCRIPT.py [ARGS], got "
                          f"{' '.join(command) or 'nothing'!r} (python's own options and -m are not supported)")
    if not (folder / words[0]).is_file():
        raise ConfigError(f"after --: {words[0]} not found in {folder}; run advisor from the folder you run the script from")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", Path(words[0]).stem)
    return name, {"name": name, "workload": {"kind": "script", "script": words[0], "args": words[1:]}}
