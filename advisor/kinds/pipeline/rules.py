"""The pipeline kind's diagnosis rules: parse, I/O, the user's Python."""

from __future__ import annotations

from typing import Optional

from advisor.evidence import Evidence
from advisor.findings import Diagnosis, Finding, Rule, Thresholds, band, diagnose_memory


def diagnose_parse(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    derived = evidence.derived
    share, cpu = derived.get("read_share", 0.0), derived.get("read_cpu_over_wall", 0.0)
    severity = band(share, t.parse_moderate, t.parse_high)
    if severity is None or cpu < t.read_cpu_bound:
        return None
    fmt = evidence.profile.environment.get("format", "")
    summary = f"parse-bound: reading the {fmt} source takes {share:.0%} of the run, on the CPU"
    findings = (
        Finding("read share of the run", share, t.parse_high if severity == "high" else t.parse_moderate),
        Finding("read CPU over read wall time", cpu, t.read_cpu_bound),
        Finding("rows/s", derived.get("rows_per_s", 0.0), unit="rows/s"),
    )
    return Diagnosis("parse", severity, share, summary, findings, ("parquet_cache", "arrow_engine", "columns", "dtypes"))


def diagnose_io(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    derived = evidence.derived
    share, cpu = derived.get("read_share", 0.0), derived.get("read_cpu_over_wall", 0.0)
    severity = band(share, t.parse_moderate, t.parse_high)
    if severity is None or cpu >= t.read_cpu_bound:
        return None
    summary = f"I/O-bound: reading takes {share:.0%} of the run, mostly waiting on storage ({cpu:.0%} on the CPU)"
    findings = (
        Finding("read share of the run", share, t.parse_moderate),
        Finding("read CPU over read wall time", cpu, t.read_cpu_bound),
    )
    return Diagnosis("io", severity, share, summary, findings, ("parquet_cache", "columns"))


def diagnose_python(evidence: Evidence, t: Thresholds) -> Optional[Diagnosis]:
    derived = evidence.derived
    share = derived.get("python_share", 0.0)
    severity = band(share, t.python_moderate, t.python_high)
    if severity is None:
        return None
    spots = evidence.profile.hotspots
    findings = [
        Finding("the user's Python, share of the run", share, t.python_high if severity == "high" else t.python_moderate),
        Finding("transform share of the run", derived.get("transform_share", 0.0)),
    ]
    callback = (spots.get("callbacks") or [None])[0]
    if callback:
        caller, callee = callback["caller"], callback["callee"]
        where = f"{_short(caller['file'])}:{caller['line']}"
        summary = (f"Python-overhead-bound: {where} calls {_short(callee['file'])}:{callee['line']} back row by row "
                   f"(`{caller['code']}`); the user's Python takes {share:.0%} of the run")
        findings.append(Finding(f"row-wise call at {where} (share of the transform)", caller["inclusive_share"]))
    else:
        top = (spots.get("lines") or [{}])[0]
        where = f"{_short(top.get('file', '?'))}:{top.get('line', '?')}"
        summary = f"Python-overhead-bound: the transform's own Python lines take {share:.0%} of the run, most at {where}"
    return Diagnosis("python", severity, share, summary, tuple(findings), ("vectorise", "dask"))


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


PIPELINE_RULES: tuple[Rule, ...] = (diagnose_memory, diagnose_parse, diagnose_io, diagnose_python)
