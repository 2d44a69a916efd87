"""PNG plots for report.md: step-time breakdown (or a service's latency distribution), speedup
with its interval, optimisation history."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from advisor.verdict import levels_of  # noqa: E402


def row_label(rec: dict, width: int = 38) -> str:
    changes = ", ".join(f"{key.split('.')[-1]}={value}" for key, value in rec["changes"].items())
    text = f"#{rec['rank']} {changes}"
    return text if len(text) <= width else text[: width - 1] + "…"


PARTS = (("data wait", "#e07b39"), ("transfer", "#9b59b6"), ("compute", "#3c78b4"))


def plot_breakdown(payload: dict, baseline_ms: dict, path: Path) -> Path:
    rows = [("baseline", baseline_ms)] + [
        (row_label(r), r["step_breakdown_ms"]) for r in payload["recommendations"]
    ]
    rows = [(label, parts) for label, parts in rows if parts]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.5))
    for index, (label, parts) in enumerate(reversed(rows)):
        left = 0.0
        for part, color in PARTS:
            width = parts.get(part, 0.0)
            ax.barh(index, width, left=left, color=color, label=part if index == 0 else None)
            left += width
    ax.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)])
    ax.set_xlabel("mean step time (ms)")
    ax.set_title("Where a step's time goes, before and after")
    ax.legend(loc="lower right")
    return _save(fig, path)


def plot_speedups(payload: dict, path: Path) -> Path:
    recs = payload["recommendations"]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(recs) + 1.5))
    for index, rec in enumerate(reversed(recs)):
        low, high = rec["interval"]
        color = "#2e8b57" if rec["verified"] else "#999999"
        ax.errorbar(rec["speedup"], index, xerr=[[rec["speedup"] - low], [high - rec["speedup"]]], fmt="o", color=color, capsize=4)
    ax.axvline(payload["min_speedup"], linestyle="--", color="#c0392b", label=f"min_speedup {payload['min_speedup']:.2f}x")
    ax.axvline(1.0, color="#555555", linewidth=0.8)
    ax.set_yticks(range(len(recs)), [row_label(r) for r in reversed(recs)])
    ax.set_xlabel(f"speedup over the baseline ({levels_of(recs)} interval, paired interleaved runs)")
    ax.set_title("Verified speedups (green) and the rest (grey)")
    ax.legend(loc="lower right")
    return _save(fig, path)


def plot_history(payload: dict, path: Path) -> Path:
    trials = sorted(payload["trials"], key=lambda t: t["number"])
    fig, ax = plt.subplots(figsize=(8, 4))
    good = [(t["number"], t["measurement"]["samples_per_s"]) for t in trials if t["feasible"]]
    bad = [t["number"] for t in trials if not t["feasible"]]
    if good:
        ax.scatter(*zip(*good), color="#3c78b4", label="trial")
    if bad:
        ax.scatter(bad, [0] * len(bad), marker="x", color="#c0392b", label="infeasible (crash, hang, memory)")
    best, line = 0.0, []
    for t in trials:
        if t["feasible"]:
            best = max(best, t["measurement"]["samples_per_s"])
        line.append((t["number"], best))
    if line:
        ax.step(*zip(*line), where="post", color="#2e8b57", label="best so far")
    ax.axhline(payload["baseline"]["samples_per_s"], linestyle="--", color="#555555", label="baseline")
    ax.set_xlabel("trial")
    ax.set_ylabel(payload["unit"])
    ax.set_title("Optimisation history")
    ax.legend(loc="lower right")
    return _save(fig, path)


def plot_latency(payload: dict, path: Path) -> Path:
    """A service's latency distribution (what share of requests finished within x ms), the
    baseline against each recommendation's trial, p95 marked."""
    trials = {t["number"]: t["measurement"] for t in payload["trials"]}
    rows = [("baseline", payload["baseline"]["measurement"].get("latency", {}), "#555555")]
    colors = ("#2e8b57", "#3c78b4", "#e07b39")
    rows += [(row_label(rec), trials.get(rec["trial"], {}).get("latency", {}), colors[index % 3])
             for index, rec in enumerate(payload["recommendations"][:3])]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, latency, color in rows:
        values = sorted(latency.get("latencies_ms", []))
        if not values:
            continue
        shares = [(index + 1) / len(values) for index in range(len(values))]
        ax.step(values, shares, where="post", color=color, label=f"{label} (p95 {latency['p95_ms']:.1f} ms)")
        ax.axvline(latency["p95_ms"], color=color, linestyle=":", linewidth=0.8)
    ax.axhline(0.95, color="#c0392b", linewidth=0.6)
    plain_log_scale(ax, "x")
    ax.set_xlabel("latency (ms, from arrival to output)")
    ax.set_ylabel("share of requests within")
    ax.set_title("Latency distribution, before and after")
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path)


def plot_load_curve(payload: dict, path: Path) -> Path:
    """Latency against the rate answered, for the baseline and #1: p50, p95 and p99 at each rate
    the capacity search replayed, the SLO drawn across; a saturated rate is marked where it
    saturated (its percentiles measure the run's length, so they are not drawn), and the rate a
    replay's own service times read off (`capacity.read_off`) on the SLO, as a hollow diamond:
    a search that ends after a replay or two still shows where the edge lies."""
    curves = payload["load_curve"]
    slo = curves["slo_ms"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for name, color in (("baseline", "#555555"), ("#1", "#2e8b57")):
        points = sorted(curves.get(name, []), key=lambda p: p["served_per_s"])
        kept = [p for p in points if not p["saturated"]]
        label = name if name == "baseline" else row_label(payload["recommendations"][0])
        for key, style in (("p50_ms", ":"), ("p95_ms", "-"), ("p99_ms", "--")):
            ax.plot([p["served_per_s"] for p in kept], [p[key] for p in kept], style, color=color, marker="o",
                    markersize=3, label=f"{label} {key[:3]}" if key != "p50_ms" or name == "baseline" else None)
        read_off = [p["reads_off_per_s"] for p in points if p.get("reads_off_per_s")]
        ax.plot(read_off, [slo] * len(read_off), linestyle="none", marker="D", markersize=6, markerfacecolor="none",
                color=color, label=f"{label} capacity, read off its service times" if read_off else None)
        for point in (p for p in points if p["saturated"]):
            ax.axvline(point["served_per_s"], color=color, linestyle=(0, (1, 3)), linewidth=0.8)
            ax.plot([point["served_per_s"]], [slo], marker="x", color=color, markersize=8)
    ax.axhline(slo, color="#c0392b", linewidth=0.8, label=f"SLO p95 {slo:g} ms")
    plain_log_scale(ax, "y")
    ax.set_xlabel("requests answered per second (x: saturated, its queue grew without bound)")
    ax.set_ylabel("latency (ms, from arrival to output)")
    ax.set_title("Latency against load: p50 dotted, p95 solid, p99 dashed")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)  # beside the axes: a curve of one rate hides under it
    return _save(fig, path)


def plain_log_scale(ax, which: str) -> None:
    """A log axis ("x" or "y") labelled 1, 2, 5, 10, 20 rather than in powers of ten."""
    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    axis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
