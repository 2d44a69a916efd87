"""The diagnosis stage: the baseline's runs measured (`collect_evidence`), their derived
quantities (`with_derived`), and the ranked diagnoses (`diagnose`), each by the evidence's kind
(`advisor.kinds`: its runs, its `derive`, its rules); `render_diagnosis` prints them.

The pieces every kind's rules share (thresholds, findings, the memory rule) are in
`advisor.findings`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

from advisor.config import AdvisorConfig
from advisor.evidence import Evidence, Progress, check_capacity, check_losses, describe_run
from advisor.findings import SEVERITY_ORDER, THRESHOLDS, Diagnosis, Thresholds
from advisor.fingerprint import fingerprint
from advisor.harness import run_measurement
from advisor.kinds import kind_of
from advisor.measure import QUIET_WAIT_S, Measurement, taken_again_once_quiet
from advisor.recipes import fixes_for
from advisor.report import busy_line


def diagnose(evidence: Evidence, thresholds: Thresholds = THRESHOLDS) -> list[Diagnosis]:
    """All diagnoses that apply (the rules of the evidence's kind), each with the recipes that
    target it; the bottleneck first: memory, where the job does not fit, then by the share of
    the step each explains (each second of it charged to one cause), the band breaking ties;
    memory close to its budget, not a share of the step, last."""
    kind = kind_of(evidence.kind)
    found = [dataclasses.replace(d, fixes=fixes_for(d.bottleneck, kind.recipe_family, first=d.fixes))
             for rule in kind.rules() if (d := rule(evidence, thresholds)) is not None]
    return sorted(found, key=lambda d: (_memory_place(d), -round(d.share, 2), SEVERITY_ORDER[d.severity]))


def _memory_place(diagnosis: Diagnosis) -> int:
    """0: the job does not fit its budget; 1: a share of the step; 2: memory near its budget."""
    if diagnosis.bottleneck != "memory":
        return 1
    return 0 if diagnosis.severity == "high" else 2


def collect_evidence(config: AdvisorConfig, progress: Progress = lambda line: None) -> Evidence:
    """Runs the measurements of the baseline plan for its kind, each in a fresh child."""
    kind = kind_of(config)
    plan = kind.baseline_plan(config)
    steps = {"profile": config.measure.profile_steps}
    runs = {}
    for index, (mode, what) in enumerate(kind.evidence_runs, start=1):
        progress(f"[{index}/{len(kind.evidence_runs)}] {what} ...")
        run = measured_when_quiet(functools.partial(
            run_measurement, config, plan, mode, steps.get(mode, config.measure.steps), config.measure.timeout_s,
            fresh=kind.fresh_children,
        ), progress)
        runs[mode] = run
        if mode == "full":
            check_losses(run)
            check_capacity(run)
            if run.environment.get("parameters_changed") is False:
                progress(f"      warning: the model's parameters did not change over {config.measure.steps} timed steps: "
                         "does the step call optimizer.step()? advisor times what the step does, as it is")
    evidence = with_derived(Evidence(**runs, max_memory_mb=config.constraints.max_memory_mb, kind=config.kind))
    seen = fingerprint(config, kind.seen(evidence))["components"]
    return dataclasses.replace(evidence, workload=config.name, fingerprint=seen)


def measured_when_quiet(measure: Callable[[], Measurement], progress: Progress,
                        quiet_wait_s: float = QUIET_WAIT_S) -> Measurement:
    """A diagnosis run, taken once more after the machine quiets when other processes took
    BUSY_SHARE or more of its CPU during it: on a busy machine every share of the step moves (the
    step itself slows), so the bottleneck named can be the wrong one, and a study keeps its
    diagnosis for its whole life (a resume reuses it). Of the two, the quieter run is kept."""
    return taken_again_once_quiet(
        measure, lambda run: "      measured again once the machine is quiet: a busy machine's shares can name the wrong bottleneck",
        progress, quiet_wait_s, heard=lambda run: progress(f"      {describe_run(run)}"))


def with_derived(evidence: Evidence) -> Evidence:
    """Adds the derived quantities; a pure function of the runs."""
    return dataclasses.replace(evidence, derived=kind_of(evidence.kind).derive(evidence))


def render_diagnosis(name: str, evidence: Evidence, diagnoses: list[Diagnosis]) -> str:
    lines = [f"advisor diagnose: {name}", ""]
    lines += busy_line((evidence.full, evidence.synthetic, evidence.cached), "the diagnosis")
    return "\n".join(line for line in lines + kind_of(evidence.kind).describe(evidence, diagnoses) if line is not None)
