"""report.html: one self-contained page per session (no network: its plots are inlined), written
beside report.md from `recommendations.json` alone, so `advisor report CONFIG --html` rebuilds
it for a past session from what MLflow kept.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from advisor.outputs import write_whole
from advisor.report import SHOWN_REJECTIONS, loader_lines, render_recommendations, ruled_out_plan_lines, write_plots
from advisor.verdict import levels_of

LEAD_FIGURE = "speedup.png"  # the speedups with their intervals: what the page leads with
FIGURES = ("load_curve.png", "latency.png", "breakdown.png", "speedup.png", "history.png")  # in the page's order, where a session has them

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; width: 100%; } th, td { padding: .35em .6em; border-bottom: 1px solid #eee; text-align: left; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
.verified { color: #1e7e34; font-weight: 600; } .unverified { color: #888; } .failed { color: #b00020; font-weight: 600; }
pre { background: #f6f8fa; padding: .8em; overflow-x: auto; font-size: 13px; }
.finding { color: #555; } img { max-width: 100%; border: 1px solid #eee; margin: .5em 0; }
details { margin: .4em 0 1em 0; } summary { cursor: pointer; }
"""


def escape(value: object) -> str:
    return html.escape(str(value))


def inlined(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{escape(path.stem)}" src="data:image/png;base64,{data}">'


def diagnosis_section(payload: dict) -> list[str]:
    parts = ["<h2>Diagnosis</h2>"]
    if not payload["diagnoses"]:
        parts.append("<p>No bottleneck was diagnosed.</p>")
    for diagnosis in payload["diagnoses"]:
        parts.append(f"<p><b>{escape(diagnosis['bottleneck'])}</b> ({escape(diagnosis['severity'])}): "
                     f"{escape(diagnosis['summary'])}</p><ul>")
        for finding in diagnosis.get("findings", []):
            value = finding["value"]
            shown = f"{value:,.3g}" if isinstance(value, (int, float)) else value
            parts.append(f'<li class="finding">{escape(finding["metric"])}: {escape(shown)} {escape(finding.get("unit") or "")}</li>')
        parts.append("</ul>")
    breakdown = payload["baseline"].get("step_breakdown_ms") or {}
    if breakdown:
        parts.append("<p>The baseline's step: " + ", ".join(f"{escape(part)} {ms:.1f} ms" for part, ms in breakdown.items())
                     + "</p>")
    return parts


def tied_ranks(recs: list[dict]) -> dict[int, list[int]]:
    """For each verified rank, the other verified ranks whose intervals overlap its own: their
    order is not told apart by the measurements."""
    verified = [rec for rec in recs if rec["verified"]]
    return {rec["rank"]: [other["rank"] for other in verified if other is not rec
                          and other["interval"][0] <= rec["interval"][1] and rec["interval"][0] <= other["interval"][1]]
            for rec in verified}


def ranking_section(payload: dict) -> list[str]:
    parts = ["<h2>Recommendations</h2>", f"<p>Baseline: {payload['baseline']['samples_per_s']:,.0f} {escape(payload['unit'])}"
             + (f" (ideal {payload['baseline']['ideal_samples_per_s']:,.0f})" if payload["baseline"].get("ideal_samples_per_s")
                else "") + "</p>"]
    parts += [f"<p>{escape(line)}</p>" for line in loader_lines(payload)]
    recs = payload["recommendations"]
    if not recs:
        return parts + ["<p>No fix to recommend: nothing cleared the bar.</p>"]
    ties = tied_ranks(recs)
    parts.append(f"<table><tr><th>rank</th><th>fix</th><th>speedup</th><th>{levels_of(recs)} interval</th><th>verified</th>"
                 "<th>numerics</th><th>peak MB</th><th></th></tr>")
    for rec in recs:
        tied = ties.get(rec["rank"])
        tie = f"tied with {', '.join(f'#{rank}' for rank in tied)}: the intervals overlap" if tied else ""
        low, high = rec["interval"]
        numerics = rec["numerics"]
        numerics_text = "n/a" if not numerics else ("ok" if numerics["passed"] else "FAILED")
        status = ('<span class="verified">verified</span>' if rec["verified"] else
                  '<span class="unverified">not verified</span>')
        parts.append(f"<tr><td>#{rec['rank']}</td><td>{escape('+'.join(rec['recipes']))}</td>"
                     f'<td class="number">{rec["speedup"]:.2f}x</td><td class="number">{low:.2f}-{high:.2f}x</td>'
                     f"<td>{status}</td><td>{escape(numerics_text)}</td><td class=\"number\">{rec['peak_memory_mb']:,.0f}</td>"
                     f'<td class="finding">{escape(tie)}</td></tr>')
    parts.append("</table>")
    if ties and any(ties.values()):
        parts.append("<p>Ranks tied within their intervals are equally good on this evidence: pick by what each "
                     "changes, or run more rounds (search.precision) to tell them apart.</p>")
    first_of: dict[tuple, int] = {}  # a recipe set's first rank: its snippet is printed there, once
    for rec in recs:
        parts.append(f"<h3>#{rec['rank']} {escape('+'.join(rec['recipes']))}: {rec['speedup']:.2f}x</h3>")
        parts.append(f"<p>{escape(', '.join(f'{k}={v}' for k, v in rec['changes'].items()))}</p>")
        parts.append(f"<p>{escape(rec['reason'])}</p>")
        for recipe, share in rec.get("contributions", {}).items():
            if share.get("needed_for_budget"):
                parts.append(f"<p>{escape(recipe)} is needed: without it the job breaks the memory budget</p>")
            else:
                low, high = share["interval"]
                parts.append(f"<p>{escape(recipe)}: {share['factor']:.2f}x of it, left out in the same rounds "
                             f"({low:.2f}-{high:.2f}x)</p>")
        shared = first_of.setdefault(tuple(rec["recipes"]), rec["rank"])
        if rec.get("snippet") and shared == rec["rank"]:
            parts.append(f"<details open><summary>the change to make</summary><pre><code>{escape(rec['snippet'])}"
                         "</code></pre></details>")
        elif rec.get("snippet"):
            parts.append(f"<p>The change to make is #{shared}'s above, with the values listed here.</p>")
    return parts


def rejected_section(payload: dict) -> list[str]:
    rejected, skipped = payload["rejected"], payload.get("recipes_skipped", {})
    parts = ["<h2>Tried and rejected, and not tried</h2>", "<ul>"]
    parts += [f"<li>{escape('+'.join(r['recipes']))} ({escape(r['plan_changes'])}): {escape(r['reason'])}</li>"
              for r in rejected[:SHOWN_REJECTIONS]]
    if len(rejected) > SHOWN_REJECTIONS:
        parts.append(f"<li>... and {len(rejected) - SHOWN_REJECTIONS} more (recommendations.json)</li>")
    parts += [f"<li>{escape(name)} not tried: {escape(why)}</li>" for name, why in skipped.items()]
    parts += [f"<li>{escape(line)}</li>" for line in ruled_out_plan_lines(payload)]
    return parts + ["</ul>"]


def page(payload: dict, figures: list[Path]) -> str:
    """The whole page: the speedups with their intervals (a picture), the ranking with each fix's
    change, the diagnosis, what was rejected, the other plots, and the terminal's own table at the end."""
    title = f"advisor: {payload['workload']}"
    lead = [figure for figure in figures if figure.name == LEAD_FIGURE]  # the answer at a glance, first
    body = [f"<h1>{escape(title)}</h1>",
            f"<p>Session of {escape(payload['started'])} ({payload['duration_s']:.0f} s), fingerprint "
            f"<code>{escape(payload['fingerprint'])}</code>.</p>",
            *(inlined(figure) for figure in lead),
            *ranking_section(payload), *diagnosis_section(payload), *rejected_section(payload),
            "<h2>Plots</h2>", *(inlined(figure) for figure in figures if figure.name != LEAD_FIGURE),
            "<h2>As the terminal showed it</h2>", f"<pre>{escape(render_recommendations(payload))}</pre>"]
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_page(payload: dict, folder: Path, with_plots: bool = False) -> Path:
    """report.html in `folder`, beside the plots there (`with_plots`: drawn first, from the payload)."""
    if with_plots:
        folder.mkdir(parents=True, exist_ok=True)
        write_plots(payload, folder)
    path = folder / "report.html"
    write_whole(path, page(payload, [folder / name for name in FIGURES if (folder / name).exists()]))
    return path
