"""Resolves a config's `module:callable` references into the user's own code.

References resolve relative to the config's folder: `pkg.mod:fn` is imported with that folder
first on `sys.path`; `path/to/file.py:fn` names a file, whose folder is put on `sys.path` so
that DataLoader workers started by spawn can import it again. A config that names code runs
that code, as a Makefile does.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

from advisor.config import CALLABLE_PATTERN
from advisor.errors import UserError


def write_no_bytecode() -> None:
    """Importing the user's modules writes no `__pycache__` beside them, here or in any process
    started from here (children inherit the variable): a session leaves the user's folders as it
    found them. Bytecode that exists (an installed package's) is still read."""
    sys.dont_write_bytecode = True
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"


def resolve_callable(ref: Any, root: Path, key_path: str) -> Callable:
    """Imports `module:callable` (or `file.py:callable`) relative to `root`; a callable (given
    through the Python API) is its own reference."""
    if callable(ref):
        return ref
    match = CALLABLE_PATTERN.match(ref)
    if not match:
        raise UserError(f"{key_path}: {ref!r} is not 'module:callable' or 'path/to/file.py:callable'")
    module_name, attr = match["module"], match["attr"]
    if match["file"]:
        file = (root / f"{module_name}.py").resolve()
        if not file.is_file():
            raise UserError(f"{key_path}: file {file} not found; paths resolve relative to {root}")
        search_path, module_name = file.parent, file.stem
    else:
        search_path = root
    if str(search_path) not in sys.path:
        sys.path.insert(0, str(search_path))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise UserError(f"{key_path}: no module named {module_name!r} next to {root}; check the name") from None
        raise UserError(f"{key_path}: importing {module_name!r} failed: {_one_line(exc)}") from None
    except Exception as exc:  # the user's module raised while importing
        raise UserError(f"{key_path}: importing {module_name!r} raised {_one_line(exc)}") from None
    target = getattr(module, attr, None)
    if target is None:
        raise UserError(f"{key_path}: module {module_name!r} has no attribute {attr!r}; check the name after ':'")
    if not callable(target):
        raise UserError(f"{key_path}: {ref!r} is a {type(target).__name__}, not a callable")
    return target


def call_user(fn: Callable, kwargs: dict, key_path: str) -> Any:
    """Calls a user's builder; a TypeError from bad arguments is the user's to fix."""
    try:
        return fn(**kwargs)
    except TypeError as exc:
        if _raised_by_call_itself(exc):
            raise UserError(f"{key_path}_args: {exc}; fix the arguments in the config") from None
        raise


def _raised_by_call_itself(exc: TypeError) -> bool:
    # A TypeError whose traceback ends in this frame came from binding the arguments.
    return len(traceback.extract_tb(exc.__traceback__)) == 1


def _one_line(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}{': ' + message if message else ''}{where}"
