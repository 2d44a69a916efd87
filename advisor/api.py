"""The Python API: `advisor.diagnose(config)` and `advisor.optimize(config)` for notebooks and CI.

`config` is a YAML path, a mapping shaped like the YAML, or an `AdvisorConfig`. In a mapping,
a reference may be the callable itself (`"model": build_model`): measurement children receive
the config pickled with cloudpickle, so a function defined in a notebook or in the calling
script travels by value, and one from an importable module by reference. A script that calls
`optimize` must do so under `if __name__ == "__main__":`, as any multiprocessing code must:
pipeline children start a fresh interpreter, which imports the script again.

The CLI runs these same functions, so the results returned here are the numbers it prints and
logs to MLflow.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

from advisor.config import AdvisorConfig
from advisor.errors import UserError
from advisor.evidence import Evidence
from advisor.findings import Diagnosis
from advisor.kinds import load_config, parse_config
from advisor.workload import write_no_bytecode

ConfigLike = Union[str, Path, dict, AdvisorConfig]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Diagnosed:
    """What `advisor diagnose` prints: the runs' evidence and the diagnoses, the bottleneck first."""

    config: AdvisorConfig
    evidence: Evidence
    diagnoses: list[Diagnosis]

    @property
    def bottleneck(self) -> Optional[str]:
        return self.diagnoses[0].bottleneck if self.diagnoses else None

    @property
    def baseline_failed(self) -> str:
        """Why the job failed as it is (crashed, hung, a nan loss: `advisor diagnose`'s exit status
        4, and then no bottleneck); empty where it ran."""
        return "" if self.evidence.full.ok else self.evidence.full.reason

    def to_dict(self) -> dict:
        return {"workload": self.config.name, "bottleneck": self.bottleneck,
                "diagnoses": [d.to_dict() for d in self.diagnoses], "evidence": self.evidence.to_dict()}


@dataclass(frozen=True)
class Optimized:
    """What `advisor optimize` prints and logs: the session, its ranked recommendations (with
    their MLflow run ids), the `recommendations.json` payload and the results folder."""

    session: Any  # advisor.session.SessionResult
    payload: dict
    folder: Path
    mlflow: Any  # the tracking.SessionLog that logged it

    @property
    def recommendations(self) -> list:
        ids = {r["rank"]: r.get("mlflow_run_id") for r in self.payload["recommendations"]}
        import dataclasses

        return [dataclasses.replace(r, mlflow_run_id=ids.get(r.rank)) for r in self.session.recommendations]


def as_config(config: ConfigLike, root: Union[str, Path, None] = None) -> AdvisorConfig:
    """A validated config from a path, a mapping (references relative to `root`, by default the
    working folder) or a config already made."""
    if isinstance(config, AdvisorConfig):
        return config
    if isinstance(config, dict):
        return parse_config(config, Path(root or os.getcwd()).resolve() / "<dict config>")
    if not isinstance(config, (str, os.PathLike)):
        from advisor.config import ConfigError

        raise ConfigError(f"config: got {type(config).__name__} {str(config)[:60]!r}; pass the path of a YAML config, "
                          "a dict shaped like one, or an AdvisorConfig")
    return load_config(config)


def diagnose(config: ConfigLike, progress: Optional[Progress] = None, root=None) -> Diagnosed:
    """Measures the baseline and names its bottlenecks, with evidence."""
    from advisor.diagnosis import collect_evidence
    from advisor.diagnosis import diagnose as rank_diagnoses

    check_main_guard()
    write_no_bytecode()
    config = as_config(config, root)
    start_children(config)
    evidence = collect_evidence(config, progress or _quiet)
    return Diagnosed(config, evidence, rank_diagnoses(evidence))


def optimize(config: ConfigLike, progress: Optional[Progress] = None, results: Union[str, Path, None] = None,
             fresh: bool = False, evidence: Optional[Evidence] = None, root=None,
             started: Optional[float] = None) -> Optimized:
    """Diagnoses, trials, verifies and ranks; writes the results folder and logs to MLflow.
    `started`: when the user's command began (the `advisor` command: as it was loaded), now if
    not given; the time to the first verified fix counts from it.

    Raises:
        UserError: bad input (the config, an address, a results folder that holds files), one line.
    """
    started = time.time() if started is None else started  # the first verified fix's time counts MLflow's start-up too
    from advisor.addresses import check_storage, check_tracking
    from advisor.evidence import check_losses
    from advisor.fingerprint import check_evidence

    check_main_guard()
    write_no_bytecode()
    config = as_config(config, root)
    progress = progress or _quiet
    check_results_folder(results, config)
    if evidence is not None:
        check_evidence(config, evidence)
        check_losses(evidence.full)
    check_storage(config)  # bad addresses are one line, before anything is measured, written or imported
    check_tracking(config)
    from advisor import search, tracking
    from advisor.session import Hooks
    from advisor.session import optimize as run_session

    if fresh:
        from advisor.session.claim import check_none_running

        check_none_running(config)  # never the study of a session that runs
        search.remove_study(config)
    start_children(config)
    log = tracking.SessionLog(config, progress)
    try:
        result = run_session(config, progress, evidence=evidence, hooks=Hooks(trial=log.trial, verdict=log.verification),
                             started=started)
    except KeyboardInterrupt:
        log.close("KILLED")
        raise
    except BaseException:
        log.close("FAILED")
        raise
    payload, folder = record(config, result, results, log)
    return Optimized(result, payload, folder, log)


def record(config: AdvisorConfig, result, results: Union[str, Path, None], log) -> tuple[dict, Path]:
    """Writes a session's results folder (first: it never depends on MLflow), then completes its
    MLflow session."""
    from advisor.diagnosis import render_diagnosis
    from advisor.fingerprint import fingerprint
    from advisor.kinds import kind_of
    from advisor.session import session_payload

    payload = session_payload(result, fingerprint(config, kind_of(config.kind).seen(result.evidence)))
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(result.started))
    folder = Path(results) if results else config.root / "advisor-results" / config.name / stamp
    write_or_keep(payload, render_diagnosis(config.name, result.evidence, result.diagnoses), folder, log)
    return payload, folder


def write_or_keep(payload: dict, diagnosis_text: str, folder: Path, log) -> None:
    """The results folder, then MLflow. A folder that cannot be written at the end (checked
    before the session, yet the disk filled meanwhile): MLflow still gets the session, the
    ranking is kept in the temporary folder, and one line says where."""
    from advisor.report import write_results
    from advisor.report_html import write_page

    try:
        write_results(payload, diagnosis_text, folder)
        write_page(payload, folder)
    except OSError as exc:
        log.conclude(payload, folder, folder_written=False)
        raise UserError(results_not_written(folder, exc, keep_elsewhere(payload, folder.name))) from None
    log.conclude(payload, folder)


def keep_elsewhere(payload: dict, stamp: str) -> Optional[Path]:
    """The session's recommendations.json in the temporary folder, where its results folder
    could not take it; None where that fails too."""
    import json
    import tempfile

    from advisor.outputs import write_whole

    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(payload.get("workload", "session")))
    path = Path(tempfile.gettempdir()) / f"advisor-{name}-{stamp}-recommendations.json"
    try:
        write_whole(path, json.dumps(payload, indent=2, default=str))
    except OSError:
        return None
    return path


def results_not_written(folder: Path, exc: OSError, kept: Optional[Path]) -> str:
    """Which of the folder's files are whole (each is written whole or not at all), and where the ranking went."""
    whole = [name for name in ("recommendations.json", "report.md", "report.html") if (folder / name).is_file()]
    there = f"; whole in it: {', '.join(whole)}" if whole else ""
    elsewhere = (f"the ranking is kept at {kept}" if kept else
                 "the ranking could not be kept anywhere on disk; it is in MLflow where that could be written")
    return (f"results: {folder} could not be written ({exc.strerror or exc}){there}; {elsewhere}; free room there, "
            "then advisor report --html writes the report again from MLflow")


def check_main_guard() -> None:
    """A script's call to advisor must sit under `if __name__ == "__main__":`: measurement
    children import the script again, as multiprocessing's do, and an unguarded call would run
    in each (multiprocessing's own error then comes from every child, and no run is measured)."""
    import ast
    import sys

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path == "<stdin>" and getattr(main, "__spec__", None) is None:  # `python - < script.py`
        raise UserError("the script was read from standard input, which measurement children cannot import again "
                        "(as multiprocessing's cannot: each would crash); save it to a file and run python FILE.py")
    if getattr(main, "__spec__", None) is not None or not path or not str(path).endswith(".py") or not Path(path).is_file():
        return  # python -m, python -c, a notebook, the advisor command: a script run by its path is imported again
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is vars(main) and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:
        return  # not called from the script's top level (a thread, an import of another module)
    line = frame.f_lineno
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return

    def main_test(test: ast.expr) -> bool:
        return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
                and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators))

    if not any(isinstance(node, ast.If) and main_test(node.test) and node.lineno <= line <= node.end_lineno
               for node in ast.walk(tree)):
        raise UserError(f"{path}:{line}: advisor is called at the top level of the script, which every measurement "
                        "child imports again (as multiprocessing's do); put the call under "
                        "`if __name__ == \"__main__\":`")


def check_results_folder(path: Union[str, Path, None], config: Optional[AdvisorConfig] = None) -> None:
    """The results folder can be written, checked before anything is measured: `--results DIR`
    (one that already holds files is never overwritten), else advisor-results/ next to the config.
    Nothing on its way may be a file, and the first folder on it that exists must be writable."""

    option = "--results" if path else "the results folder"
    if path and Path(path).is_dir() and any(Path(path).iterdir()):
        raise UserError(f"--results: {path} already holds files; name a new folder, or move those away first")
    if path and Path(path).exists() and not Path(path).is_dir():
        raise UserError(f"--results: {path} is a file; name a folder")
    if path is None and config is None:
        return
    target = Path(path).absolute() if path else config.root / "advisor-results" / config.name
    existing = next(folder for folder in (target, *target.parents) if folder.exists())
    if not existing.is_dir():
        raise UserError(f"{option}: {existing} is a file, where {target} would go; move it, or pass --results DIR")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{option}: {existing} cannot be written, where {target} would go; pass --results DIR "
                        "naming a folder you can write")


def start_children(config: AdvisorConfig) -> None:
    """Training children fork from a server that preloads torch: start it now, in the background.
    A script runs in a copy of the machine: where that cannot be had, say so before measuring.
    What killed sessions left in the temp folder goes first (the `advisor` command's start sweeps
    too; a notebook's session has only this one)."""
    from advisor.harness.lifetime import remove_orphaned_run_folders
    from advisor.harness.runner import sandboxed

    remove_orphaned_run_folders()

    if sandboxed(config):
        from advisor.harness.sandbox import unavailable

        why = unavailable()
        if why:
            raise UserError(f"the script cannot run in its own copy of the machine here ({why}), which keeps every "
                            "write and process of its runs from your files; run with --unsandboxed to measure it "
                            "with advisor's in-interpreter hooks alone, which do not contain C code, child processes "
                            "or writes outside its folder")

    warm_up_fork_server(config)


def warm_up_fork_server(config: AdvisorConfig) -> None:
    """Starts the fork server in the background where the config's runs fork from it. A
    pipeline's runs start new interpreters and a data-parallel job's ranks start under torchrun:
    a server importing torch beside them would only take a core from their start."""
    from advisor.harness import launch
    from advisor.kinds import forks_from_server, kind_of

    if forks_from_server(config):
        launch.warm_up(kind_of(config).preload)


def _quiet(line: str) -> None:
    return None
