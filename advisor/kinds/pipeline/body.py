"""The pipeline kind's `advisor diagnose` body: its stages, the bottlenecks, its hot source lines, the advice."""

from __future__ import annotations

from pathlib import Path

from advisor.evidence import Evidence
from advisor.findings import Diagnosis
from advisor.report import advice_lines, cores, diagnosis_lines


def pipeline_body(evidence: Evidence, diagnoses: list[Diagnosis]) -> list[str]:
    """A pipeline's diagnosis: its stages, the bottlenecks, its hot source lines, the advice."""
    from advisor.advice import advice_for

    python_bound = any(d.bottleneck == "python" for d in diagnoses)
    advice = advice_for(evidence.profile.hotspots, evidence.profile.environment.get("row_functions")) if python_bound else []
    return pipeline_lines(evidence) + diagnosis_lines(diagnoses) + hotspot_lines(evidence) + advice_lines(advice)


def pipeline_lines(evidence: Evidence) -> list[str]:
    full, seen = evidence.full, evidence.profile.environment
    if not full.ok:
        return [f"the pipeline failed: {full.reason}"]
    lines = [f"throughput  {full.samples_per_s:,.0f} rows/s ({full.samples:,} rows of {seen.get('format', '?')} "
             f"in {full.stages.get('wall_s', 0):.2f} s)"]
    for name, value in full.stages.items():
        if name != "wall_s":
            share = value["wall_s"] / full.stages["wall_s"] if full.stages.get("wall_s") else 0.0
            lines.append(f"  {name:<24}{value['wall_s']:8.3f} s  {share:6.1%}   CPU {value['cpu_s']:.3f} s")
    lines.append(f"resources   peak memory {full.peak_memory_mb:,.0f} MB ({full.memory_source}),"
                 f" CPU {full.cpu_util:.0%} of {cores()} cores")
    if seen.get("columns"):
        lines.append(f"columns     the transform reads {len(seen.get('used_columns', []))} of {len(seen['columns'])}: "
                     f"{', '.join(seen.get('used_columns', []))}")
    if not evidence.profile.ok:
        lines.append(f"the profile run failed: {evidence.profile.reason}")
    return lines


def hotspot_lines(evidence: Evidence) -> list[str]:
    spots = evidence.profile.hotspots if evidence.profile.ok else {}
    if not spots.get("lines"):
        return []
    lines = ["", f"transform time by your source line ({spots['samples']} samples, innermost line of yours):"]
    for spot in spots["lines"][:5]:
        where = f"{Path(spot['file']).name}:{spot['line']}"
        lines.append(f"  {where:<24}{spot['share']:6.1%}  {spot['code'][:70]}")
    return lines
