"""The workload's fingerprint: what, if it changed, can invalidate earlier advice.

Components: the source of the model's and the dataset's code, the model's parameter count,
a sample batch's shapes and dtypes (from the baseline's runs), the config's workload section,
the Python and torch versions, and the hardware. The digest is a short hash of them all; the
components are kept so that two fingerprints can be compared in words.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any, Optional

from advisor.config import CALLABLE_PATTERN, AdvisorConfig
from advisor.kinds import kind_of


def source_of(ref: Any, root: Path) -> Optional[Path]:
    """The file a `module:callable` reference points at, found without importing it (for a
    callable given through the Python API, the file that defines it; a path is its own file)."""
    if isinstance(ref, Path):
        return (root / ref).resolve()
    if callable(ref):
        import inspect

        try:
            return Path(inspect.getsourcefile(ref) or "")
        except TypeError:
            return None
    match = CALLABLE_PATTERN.match(ref or "")
    if not match:
        return None
    if match["file"]:
        return (root / f"{match['module']}.py").resolve()
    sys.path.insert(0, str(root))
    try:
        spec = importlib.util.find_spec(match["module"])
    except (ImportError, ValueError):
        spec = None
    finally:
        sys.path.remove(str(root))
    return Path(spec.origin) if spec and spec.origin else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def workload_section(config: AdvisorConfig) -> dict:
    """The config's workload section as JSON holds it (the fingerprint's view of it)."""
    return json.loads(json.dumps(dataclasses.asdict(config.workload), default=_reference))


def _reference(value: Any) -> str:
    """A callable given through the Python API, named as a config file would name it."""
    if callable(value):
        return f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', type(value).__name__)}"
    return str(value)


def fingerprint(config: AdvisorConfig, environment: Optional[dict] = None) -> dict:
    """The components and their digest. `environment` is what the child saw (parameters, GPU)."""
    kind = kind_of(config)
    environment = environment or {}
    sources = {}
    for key, ref in kind.sources(config).items():
        path = source_of(ref, config.root)
        if path and path.is_file():
            sources[key] = {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()[:16]}
    components = {
        "sources": sources,
        "parameters": environment.get("parameters"),
        "sample": environment.get("sample") or environment.get("columns"),
        "workload": workload_section(config),
        "python": platform.python_version(),
        "torch": package_version("torch"),
        **{name: package_version(name) for name in kind.packages},
        "hardware": {"cpu": cpu_model(), "cores": os.cpu_count(), "gpu": environment.get("gpu_name")},
    }
    digest = hashlib.sha256(json.dumps(components, sort_keys=True).encode()).hexdigest()[:12]
    return {"digest": digest, "components": components}


def describe_changes(old: dict, new: dict) -> list[str]:
    """What changed between two fingerprints' components, in words."""
    changes, changed_files = [], {}
    for key in sorted(set(old.get("sources", {})) | set(new.get("sources", {}))):
        before, after = old.get("sources", {}).get(key), new.get("sources", {}).get(key)
        if before and after and before != after:
            changed_files.setdefault(after["file"], []).append(key)  # one file may hold model and dataset
        elif before != after:
            changes.append(f"{key} source {'added' if after else 'removed'}")
    for file, keys in changed_files.items():
        changes.append(f"source of the {' and '.join(keys)} changed ({file})")
    if old.get("parameters") != new.get("parameters"):
        changes.append(f"model parameters {_count(old.get('parameters'))} -> {_count(new.get('parameters'))}")
    if old.get("sample") != new.get("sample"):
        changes.append(f"sample {old.get('sample')} -> {new.get('sample')}")
    for path, before, after in _diff(old.get("workload", {}), new.get("workload", {}), "workload"):
        changes.append(f"config {path}: {before!r} -> {after!r}")
    for key in ("python", "torch", "pandas"):
        if old.get(key) != new.get(key):
            changes.append(f"{key} {old.get(key)} -> {new.get(key)}")
    for key, before in old.get("hardware", {}).items():
        after = new.get("hardware", {}).get(key)
        if before != after:
            changes.append(f"hardware {key}: {before} -> {after}")
    return changes


def _count(value) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _diff(old, new, path: str):
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            yield from _diff(old.get(key), new.get(key), f"{path}.{key}")
    elif old != new:
        yield path, old, new


def check_evidence(config: AdvisorConfig, evidence) -> None:
    """Evidence given to a session (`--evidence`) must be this workload's, measured as it is now:
    another job's figures would be taken for this one's."""
    from advisor.errors import UserError

    again = f"run advisor diagnose {config.path} --json > diagnosis.json, and give that"
    if (evidence.workload, evidence.kind) != (config.name, config.kind):
        whose = f"the {evidence.kind} workload '{evidence.workload}'" if evidence.workload else "no named workload"
        raise UserError(f"--evidence: it was measured for {whose}, not the {config.kind} workload '{config.name}'; {again}")
    changes = describe_changes(evidence.fingerprint, fingerprint(config, kind_of(config).seen(evidence))["components"])
    if changes:
        raise UserError(f"--evidence: it was measured for '{config.name}' as it was before ({'; '.join(changes)}); {again}")
