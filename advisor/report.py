"""Terminal rendering of a diagnosis."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from advisor.capacity import capacity_sentence, rates_replayed
from advisor.findings import MEMORY_FIX_HEADROOM, Diagnosis, Finding
from advisor.measure import BUSY_SHARE, page_faults_mb
from advisor.outputs import write_whole
from advisor.plan import changes_text
from advisor.verdict import astride, chance_words, levels_of, was_busy
from advisor.verify import ANSWERED


def format_value(finding: Finding) -> str:
    value = finding.value
    if finding.unit:
        return f"{value:,.1f} {finding.unit}" if value < 100 else f"{value:,.0f} {finding.unit}"
    return f"{value:.1%}" if abs(value) <= 1.5 else f"{value:.2f}x"


def format_threshold(finding: Finding) -> str:
    if finding.threshold is None:
        return ""
    probe = Finding(finding.metric, finding.threshold, unit=finding.unit)
    return f"  (threshold {format_value(probe)})"


def busy_line(runs, during: str) -> list[str]:
    """A warning when other processes took enough of the machine to distort these runs' timings."""
    busiest = max((run for run in runs if run is not None), key=lambda run: run.other_cpu_share, default=None)
    if busiest is None or busiest.other_cpu_share < BUSY_SHARE:
        return []
    return [f"the machine was busy: other processes took {busiest.other_cpu_share:.0%} of its CPU during {during} "
            f"(the {busiest.mode} run); timings may be distorted, run again on a quiet machine"]


def diagnosis_lines(diagnoses: list[Diagnosis]) -> list[str]:
    lines = [""]
    if diagnoses:
        lines.append(f"bottleneck: {diagnoses[0].bottleneck} ({diagnoses[0].severity})")
    for rank, diagnosis in enumerate(diagnoses, start=1):
        lines.append(f"{rank}. [{diagnosis.severity}] {diagnosis.summary}")
        for finding in diagnosis.evidence:
            lines.append(f"     {finding.metric}: {format_value(finding)}{format_threshold(finding)}")
        lines.append(f"     fixes to try: {', '.join(diagnosis.fixes)}")
    return lines


def gpu_summary(gpu: dict) -> str:
    if not gpu.get("available"):
        return gpu.get("note", "no GPU")
    link = (f", PCIe {gpu['pcie_to_gpu_mb_s']:,.0f} MB/s to it, {gpu['pcie_from_gpu_mb_s']:,.0f} MB/s back"
            if "pcie_to_gpu_mb_s" in gpu else "")
    return f"{gpu['name']} {gpu.get('util_mean', 0):.0f}% busy (NVML), {gpu.get('memory_mb_peak', 0):,.0f} MB{link}"


def cores() -> int:
    import os

    return os.cpu_count() or 1


SHOWN_REJECTIONS = 4


def rewrite_lines(rec: dict, payload: dict) -> list[str]:
    """A vectorised plan's rewrites as diffs against the user's functions (once: later plans with
    the same rewrites point back), and the share of the run the row-wise code had."""
    def chosen(r: dict) -> str:
        return r["plan"].get("pipeline.vectorise") or ""

    if not chosen(rec):
        return []
    first = next(r for r in payload["recommendations"] if chosen(r) == chosen(rec))
    if first is not rec:
        return [f"     rewritten row functions: as in #{first['rank']}"]
    share = payload.get("row_wise_share")
    lines = ["     rewritten row functions" + (f" (row-wise code had {share:.0%} of the transform's time)" if share else "") + ":"]
    for function in payload.get("row_functions", []):
        if function["where"] in chosen(rec).split(","):
            lines += ["       " + line for line in function["diff"].rstrip().splitlines()]
    return lines


def unvectorised_lines(payload: dict) -> list[str]:
    """Row functions left row-wise, and why: the construct, or the first row whose value changed."""
    return [f"left row-wise: {f['name']} ({f['where']}): {f['detail']}"
            for f in payload.get("row_functions", []) if f["status"] != "equal"]


def one_off_line(cost: dict) -> str:
    """A recipe's one-off cost (`Recipe.one_off_cost`), and when the faster plan pays it back."""
    after, per = cost.get("paid_back_after"), cost.get("per", "step")
    when = f"{after:,.0f} {per}{'s' if after != 1 else ''}" if after else f"never (no faster per {per})"
    took = f"{cost['seconds']:.1f} s"
    if cost.get("cached"):  # every run found it in torch.compile's cache: a first run on a machine pays more
        took += " from the session's compile cache"
    elif "cached_seconds" in cost:
        took += f" ({cost['cached_seconds']:.1f} s from the session's compile cache)"
    return f"     one-off: {cost['what']} took {took}, paid back after {when}"


def latency_text(latency: dict) -> str:
    """The percentiles and the cold start; for a saturated replay, that it saturated instead:
    its percentiles grow with the run's length, so they are not shown."""
    if latency.get("saturated"):
        return (f"saturates at {latency['served_per_s']:,.0f}/s: under the offered {latency['offered_per_s'] or 0:,.0f}/s "
                f"its queue grew while requests arrived, so its p95 measures how long the run lasted, not the service; "
                f"cold start {latency['cold_start_ms']:.0f} ms")
    at = f" at {latency['capacity_per_s']:,.0f}/s" if latency.get("capacity_per_s") else ""
    return (f"p50 {latency['p50_ms']:.1f} ms, p95 {latency['p95_ms']:.1f} ms, p99 {latency['p99_ms']:.1f} ms{at}; "
            f"cold start {latency['cold_start_ms']:.0f} ms")


def page_fault_lines(rec: dict, base: dict) -> list[str]:
    """For a fix of the allocator's thresholds: the page faults a step its gain rests on, the
    baseline's and its own, over their verification runs. How many a process faults is its
    history's doing (docs/benchmarks.md), so a user's own loop may fault fewer, and gain less."""
    faults = base.get("page_faults_per_step")
    if "allocator" not in rec["recipes"] or not faults:
        return []
    return [f"     page faults a step: the baseline {faults:,.0f} ({page_faults_mb(faults):,.0f} MB handed back and mapped "
            f"again each step), this plan {rec.get('page_faults_per_step', 0.0):,.0f}: the gain rests on them; "
            "a process of yours that faults fewer gains less (count its faults around a step: "
            "resource.getrusage(resource.RUSAGE_SELF).ru_minflt)"]


def epoch_text(epoch: dict) -> str:
    """What an epoch's end cost a run with workers, and the share of its time that was charged."""
    timed, runs = epoch.get("timed_runs"), epoch.get("runs")
    how = ("timed once a run" if timed is None or timed == runs else
           f"timed in {timed} of its {runs} runs, the others charged their mean" if timed else
           "timed in runs set aside, charged their mean")
    return (f"an epoch's end (every {epoch['steps_per_epoch']:,} steps: its workers start again or reset, their queue "
            f"refills) costs {epoch['end_s']:.2f} s, {how}: {epoch['charged_share']:.0%} of its time, included")


def capacity_lines(payload: dict) -> list[str]:
    """Objective capacity: what the figure is, how it was found and paired, where the baseline saturates."""
    base = payload["baseline"].get("latency_ms") or {}
    if base.get("capacity_per_s") is None:
        return []
    curve = (payload.get("load_curve") or {}).get("baseline", [])
    search = ("replaying just under what a queue of the measured service times predicts, then just under what "
              "each replay's own service times read off, until the next step up breaks the SLO" if base.get("guided") else
              "doubling the rate until it breaks, then bisecting")
    replayed = f"{rates_replayed(len(curve))} in the baseline's last run"
    lines = [f"capacity: the highest Poisson arrival rate whose p95 stays within {base['slo_ms']:g} ms, found by "
             f"{search} ({replayed}); each verification round measures the baseline's capacity and each plan's back "
             "to back, and the interval is over the rounds' ratios of capacities"]
    if base.get("saturates_at_per_s"):
        lines.append(f"the baseline saturates at {base['saturates_at_per_s']:,.0f}/s offered (in its last run): from there "
                     "on its queue grows without bound, and no p95 is shown for those rates")
    return lines


def answered_lines(payload: dict) -> list[str]:
    """Where a p95 objective's speedups are of requests answered a second (`speedup_basis`): why."""
    if not any(rec.get("speedup_basis") == ANSWERED for rec in payload["recommendations"]):
        return []
    base = payload["baseline"].get("latency_ms") or {}
    offered, most = base.get("offered_per_s"), base.get("full_load_per_s")
    where = (f"the baseline was offered {offered:,.0f}/s, {offered / most:.0%} of the {most:,.0f}/s it answers at full load"
             if offered and most else "the baseline was offered about what it answers at full load, or more")
    behind = (f" (it fell behind, answering {base['served_per_s']:,.0f}/s, and its p95 measures how long the replay ran)"
              if base.get("saturated") and base.get("served_per_s") else "")
    return [f"speedups are of the most requests each plan answers a second, every request queued at once, not of p95s: "
            f"{where}{behind}, so its p95 is mostly time spent queueing, which the host's pace swings from one minute "
            "to the next; of the fixes that keep up, the lowest p95 (shown under each) leads"]


def bucket_lines(payload: dict) -> list[str]:
    """Each DistributedDataParallel bucket size tried on its own, its trial's rate over the
    baseline's: reported whatever it came to, noise included (one trial each, not verified)."""
    base = payload["baseline"]
    if "ddp.bucket_cap_mb" not in base.get("plan", {}) or not base.get("samples_per_s"):
        return []  # not a data-parallel job's
    others = {key: value for key, value in base["plan"].items() if key != "ddp.bucket_cap_mb"}
    tried = sorted((t["plan"]["ddp.bucket_cap_mb"], t["measurement"]["samples_per_s"] / base["samples_per_s"])
                   for t in payload.get("trials", [])
                   if t.get("feasible") and "ddp.bucket_cap_mb" in t.get("plan", {})
                   and all(t["plan"].get(key) == value for key, value in others.items()))
    if len(tried) < 2:
        return []
    sizes = ", ".join(f"{size:g} MB {ratio:.2f}x" for size, ratio in tried)
    spread = max(r for _, r in tried) / min(r for _, r in tried) - 1
    verdict = "within trial noise" if spread < 0.10 else "see the ranking for what verified"
    return [f"bucket sizes, alone (one trial each, over the baseline): {sizes}; {spread:.0%} apart, {verdict}"]


def loader_lines(payload: dict) -> list[str]:
    """The loader model's predictions (made before the first trial) beside what was measured."""
    from advisor.loading import FETCH_THREADS, WORKERS

    model = payload.get("loader_model") or {}

    def said(label: str, verdict: dict) -> list[str]:
        plan = verdict["plan"]
        return [f"{label}: {plan[WORKERS]} worker(s) x {plan[FETCH_THREADS]} fetch thread(s), predicted "
                f"{verdict['samples_per_s']:,.0f} samples/s (bound by {verdict['why']}), measured "
                f"{verdict['measured_samples_per_s']:,.0f} ({verdict['measured_over_predicted']:.2f}x)"] + \
            ([f"     {verdict['off']}"] if verdict["off"] else [])

    lines = said(f"loader model, its plan (trial #{model['model_plan']['trial']})", model["model_plan"]) \
        if "model_plan" in model else []
    return lines + (said("loader model, the verified #1", model["verified_top"]) if "verified_top" in model else [])


def table_header(level: str, width: int = 0) -> str:
    """The ranking's header, its interval column named at the level the intervals were drawn at
    (`width`: the column's, `interval_width`; at least its name's and two spaces)."""
    name = f"{level} interval"
    return f"{'rank':<5}{'fix':<34}{'speedup':>8}  {name:<{max(width, len(name) + 2)}}{'verified':<10}{'numerics':<10}{'peak MB':>8}"


def interval_width(level: str, recs: list[dict]) -> int:
    """The interval column's width: its name's or its widest interval's ("95-98% interval",
    "12.40-15.60x"), and two spaces."""
    return max(len(f"{level} interval"), *(len(interval_text(rec)) for rec in recs)) + 2


def interval_text(rec: dict) -> str:
    low, high = rec["interval"]
    return "-" if rec["speedup"] <= 0 else f"{low:.2f}-{high:.2f}x"


def render_recommendations(payload: dict, verbose: bool = False) -> str:
    """The ranked table the terminal shows, and `advisor report` prints from MLflow; `verbose`
    (-v): every rejected plan, not the first SHOWN_REJECTIONS."""
    recs = payload["recommendations"]
    lines = baseline_lines(payload) + [""] + verdict_line(payload)
    if recs:
        width = interval_width(levels_of(recs), recs)
        lines.append(table_header(levels_of(recs), width))
        for rec in recs:
            lines += row_lines(rec, width) + detail_lines(rec, payload) + contribution_lines(rec, payload)
            lines += [one_off_line(cost) for cost in rec.get("one_off", {}).values()]
    lines += unvectorised_lines(payload) + rejection_lines(payload["rejected"], verbose)
    if recs and recs[0]["verified"]:
        top = recs[0]
        lines += ["", f"apply #1 ({top['reason']}):", top["snippet"]]
    measured = "vectorise" in payload.get("recipes_tried", [])  # its rewrites were trialled: the table says how they did
    lines += advice_lines([a for a in payload.get("advice", []) if not (measured and a.get("status") == "equal")])
    return "\n".join(lines)


def baseline_lines(payload: dict) -> list[str]:
    """The baseline's rate, and what the session read of it before ranking anything."""
    base = payload["baseline"]
    capacity = (base.get("latency_ms") or {}).get("capacity_per_s")  # over the rounds the speedups pair with
    lines = [(f"baseline: {capacity:,.0f} {payload['unit']} (over its verification rounds)" if capacity is not None else
              f"baseline: {base['samples_per_s']:,.0f} {payload['unit']}")
             + (f" (ideal {base['ideal_samples_per_s']:,.0f})" if base.get("ideal_samples_per_s") else "")]
    if base.get("latency_ms"):
        lines.append(f"baseline latency: {latency_text(base['latency_ms'])}")
    if base.get("epoch"):
        lines.append(f"baseline: {epoch_text(base['epoch'])}")
    if payload.get("baseline_failure", "").startswith("over the p95 SLO"):
        lines.append(f"the baseline breaks its SLO ({payload['baseline_failure']}): fixes that keep it are ranked "
                     f"against {payload.get('numerics_reference', 'the baseline')}")
    if payload.get("memory_fix") and payload.get("max_memory_mb"):
        lines.append(f"the baseline does not fit the {payload['max_memory_mb']:,.0f} MB budget (peak "
                     f"{base['peak_memory_mb']:,.0f} MB): fixes that fit are ranked by speed, their results checked "
                     f"against {payload.get('numerics_reference', 'the baseline')}")
    if payload.get("numerics_envelope", {}).get("amplifies"):
        lines.append(payload["numerics_envelope"]["sentence"])
    if payload.get("pruned"):
        unrun = payload.get("pruned_unrun_s", 0.0)  # none in the payload of a session before it was kept
        lines.append(f"{len(payload['pruned'])} of {len(payload['pruned']) + len(payload.get('trials', []))} trials "
                     f"pruned midway, clearly losing (trial {', '.join('#' + str(p['number']) for p in payload['pruned'])})"
                     + (f": about {unrun:,.1f} s of their timed windows left unrun, at their pace so far" if unrun else ""))
    return (lines + ruled_out_plan_lines(payload) + bucket_lines(payload) + loader_lines(payload) + capacity_lines(payload)
            + answered_lines(payload))


def ruled_out_plan_lines(payload: dict) -> list[str]:
    """The plans the search did not measure, each a variant of one that ran clearly slower than
    the baseline: how many, and which trials ruled them out (`search.dominance`)."""
    ruled_out = payload.get("ruled_out", [])
    if not ruled_out:
        return []
    by = {item["by"]["trial"]: item["by"] for item in ruled_out}
    named = "; ".join(loser_text(by[number]) for number in sorted(by))
    return [f"{len(ruled_out)} plan(s) not measured: each adds to a plan that ran clearly slower than the baseline's trial "
            f"({named}); the same plans without those changes were measured instead"]


def loser_text(loser: dict) -> str:
    return f"#{loser['trial']}: {changes_text(loser['changes'])}, at most {loser['ratio']:.2f}x"


def verdict_line(payload: dict) -> list[str]:
    """Why there is no verified fix, when there is none."""
    if payload.get("baseline_failure") and not payload.get("memory_fix"):
        return [f"the baseline itself failed ({payload['baseline_failure']}): there is nothing to compare a fix with"]
    recs = payload["recommendations"]
    if any(rec["verified"] for rec in recs):
        return []
    if any(was_busy(rec) for rec in recs):
        return ["nothing verified: the machine was busy while the fixes were verified; run it again on a quiet machine"]
    if not recs and payload.get("memory_fix") and payload.get("max_memory_mb"):
        return [memory_fix_missing(payload)]
    if not recs and payload.get("trials"):  # no verification ran: say so, not only that none passed
        return [f"nothing clears the bar: no trial with unchanged results ran faster than the baseline's "
                f"({len(payload['trials'])} measured), so none was verified"]
    return [f"nothing clears the bar: no fix was verified at >= {payload['min_speedup']:.2f}x with unchanged results",
            *ruled_out_lines(recs, payload["min_speedup"])]


def memory_fix_missing(payload: dict) -> str:
    """Why a session whose baseline broke the memory budget verified nothing: no trial fitted with
    the room a memory fix must keep, and the closest that fitted at all."""
    budget = payload["max_memory_mb"]
    fitted = [t for t in payload.get("trials", []) if t["measurement"].get("status") == "ok"
              and t["measurement"].get("peak_memory_mb", 0.0) <= budget]
    room = f"a memory fix must peak under {MEMORY_FIX_HEADROOM:.0%} of it ({MEMORY_FIX_HEADROOM * budget:,.0f} MB)"
    if not fitted:
        return f"nothing clears the bar: no trial fitted the {budget:,.0f} MB memory budget ({room})"
    closest = min(fitted, key=lambda t: t["measurement"]["peak_memory_mb"])
    return (f"nothing clears the bar: no trial fitted the {budget:,.0f} MB memory budget with room ({room}); "
            f"the leanest, #{closest['number']}, peaked at {closest['measurement']['peak_memory_mb']:,.0f} MB")


def ruled_out_lines(recs: list[dict], bar: float) -> list[str]:
    """What the verifications that fell short did settle: every one of their intervals under the
    bar is an answer (none of these fixes is worth it, and how fast the best could be at most);
    an interval astride it is not, and says so, and then the most any of them could be is what
    the rounds ruled out. A pure function."""
    short = [rec for rec in recs if rec.get("status") == "short" and rec["speedup"] > 0]
    if not short:
        return []
    unsettled = [rec for rec in short if astride(rec["status"], rec["interval"][1], bar)]
    best = max(short, key=lambda rec: rec["interval"][1])
    if not unsettled:
        return [f"ruled out at {levels_of(short)}: none of the {len(short)} fix(es) verified is {bar:.2f}x or more; "
                f"the fastest, {'+'.join(best['recipes'])}, is at most {best['interval'][1]:.2f}x"]
    return [*(f"not settled: {'+'.join(rec['recipes'])} {rec['speedup']:.2f}x ({interval_text(rec)}, {rec.get('rounds', 0)} "
              f"rounds) may or may not reach {bar:.2f}x; {more_rounds_words(rec.get('settle_chance'))}"
              for rec in unsettled),
            f"ruled out at {levels_of(short)}: none of the {len(short)} fix(es) verified is more than "
            f"{best['interval'][1]:.2f}x (the most {'+'.join(best['recipes'])} could be)"]


def more_rounds_words(settle_chance: Optional[float]) -> str:
    """What more rounds would do for a verdict not settled: where its rounds stopped as unlikely
    to decide it, its chance that search.max_pairs rounds would have (`Stopping.chances_to_decide`)."""
    if settle_chance is None:
        return "more rounds (search.max_pairs) or a quieter machine would tell"
    return (f"its rounds stopped: search.max_pairs rounds would decide it with {chance_words(settle_chance)} chance "
            "(a larger search.max_pairs or a quieter machine might tell)")


def row_lines(rec: dict, width: int = 14) -> list[str]:
    """A recommendation's row of the table (`width`: the interval column's), and the settings it changes."""
    numerics = rec["numerics"]
    numerics_text = "n/a" if not numerics else ("ok" if numerics["passed"] else "FAILED")
    status = "yes" if rec["verified"] else "flaky" if rec.get("failed_runs") else "no"
    if rec["speedup"] <= 0:  # no round measured it (a busy machine set every one aside): nothing to show
        speedup, peak = f"{'-':>8}", f"{'-':>8}"
        status = "busy" if rec.get("status") == "busy" else status
    else:
        speedup, peak = f"{rec['speedup']:>7.2f}x", f"{rec['peak_memory_mb']:>8,.0f}"
    interval = f"{interval_text(rec):<{width}}"
    return [f"{rec['rank']:<5}{'+'.join(rec['recipes'])[:33]:<34}{speedup}  {interval}{status:<10}{numerics_text:<10}{peak}",
            f"     {', '.join(f'{k}={v}' for k, v in rec['changes'].items())}"]


def detail_lines(rec: dict, payload: dict) -> list[str]:
    """What the session learned of a recommendation beyond its row."""
    base = payload["baseline"]
    lines = [f"     {rec['leads_because']}"] if rec.get("leads_because") else []
    if rec.get("latency_ms", {}).get("capacity_per_s") is not None:
        sentence = capacity_sentence(rec["latency_ms"]["capacity_per_s"], rec["latency_ms"]["slo_ms"],
                                     len(rec.get("load_curve", [])), base["latency_ms"].get("capacity_per_s"))
        lines.append(f"     {sentence}")
    if rec.get("latency_ms"):
        lines.append(f"     latency {latency_text(rec['latency_ms'])}")
    if rec.get("epoch"):
        lines.append(f"     {epoch_text(rec['epoch'])}")
    lines += page_fault_lines(rec, base) + rewrite_lines(rec, payload)
    if rec.get("busy_share", 0.0) >= BUSY_SHARE:
        lines.append(f"     the machine was busy while it was verified: other processes took up to "
                     f"{rec['busy_share']:.0%} of its CPU")
    if rec.get("set_aside_rounds"):
        lines.append(f"     {rec['set_aside_rounds']} verification round(s) set aside and run again: other processes "
                     f"took up to {rec['set_aside_share']:.0%} of the CPU in them; judged on "
                     f"{rec['rounds']} quiet rounds")
    if not rec["verified"]:
        lines.append(f"     not verified: {rec['reason']}")
    lines += unpinned_lines(rec, payload)
    gap = rec.get("gap_recovered")
    where = ("found by the diagnosis" if rec.get("ideal_source") == "diagnosis"
             else "measured beside the baseline in the first rounds")
    if gap is not None and gap > 1.0:
        lines.append(ideal_passed_line(rec, where))
    elif gap is not None:
        lines.append(f"     recovers {gap:.0%} of the gap to the ideal throughput ({where}, {rec['ideal_speedup']:.2f}x)")
    return lines


def ideal_passed_line(rec: dict, where: str) -> str:
    """A fix measured past the ideal: within its interval, it has closed the gap (the ideal is
    a point from a round or two, the fix's speedup from all of its rounds: the two disagree by
    noise alone); only a fix whose whole interval lies above the ideal shows a measurement fault."""
    ideal = rec["ideal_speedup"]
    if rec["interval"][0] <= ideal:
        return (f"     reaches the ideal {where} ({ideal:.2f}x, inside its interval): the input "
                "no longer holds the step back")
    return f"     faster than the ideal {where} ({ideal:.2f}x): a measurement fault to look into, not a result"


def unpinned_lines(rec: dict, payload: dict) -> list[str]:
    """Why a verified fix's interval is wider than the pinned one's: a faster fix verified before
    it had its number pinned, so its own rounds stopped at its verdict (`Stopping.behind`)."""
    if not rec["verified"] or rec.get("pinned", True):
        return []
    faster = [r for r in payload.get("recommendations", [])
              if r is not rec and r["verified"] and r.get("pinned") and r["speedup"] > rec["speedup"]]
    if not faster:
        return []
    rounds, rank = rec.get("rounds", 0), faster[0]["rank"]
    if rank > rec.get("rank", 0):  # ranked behind this one (a leaner fix tied with it): not the one to adopt
        return [f"     its rounds stopped at its verdict, after {rounds}, while those of the faster #{rank} "
                "went on to pin its number to search.precision: its own interval is the wider for it"]
    return [f"     its rounds stopped at its verdict, after {rounds}: the faster "
            f"#{rank} is the number to adopt, pinned to search.precision"]


def contribution_lines(rec: dict, payload: dict) -> list[str]:
    """What each recipe of a stacked plan adds, measured by leaving it out in the same rounds."""
    lines = []
    for recipe, share in rec.get("contributions", {}).items():
        if share.get("needed_for_budget"):
            lines.append(f"     {recipe} is needed: without it the job breaks the memory budget")
            continue
        low, high = share["interval"]
        budget = payload.get("max_memory_mb")
        if payload.get("memory_fix") and budget and share.get("peak_without_mb", 0) > budget:
            verdict = f"; without it the peak is {share['peak_without_mb']:,.0f} MB, over the budget"
        elif high < 1.0:
            lines.append(f"     {recipe} slows it: {1 / share['factor']:.2f}x faster without it "
                         f"({1 / high:.2f}-{1 / low:.2f}x)")
            continue
        else:
            verdict = "" if share["shown"] else ": not shown to help; the plan may drop it"
        lines.append(f"     {recipe} adds {share['factor']:.2f}x ({low:.2f}-{high:.2f}x){verdict}")
    return lines


def rejection_lines(rejected: list[dict], verbose: bool) -> list[str]:
    shown = len(rejected) if verbose else SHOWN_REJECTIONS
    lines = [f"rejected {'+'.join(r['recipes'])} ({r['plan_changes']}): {r['reason']}" for r in rejected[:shown]]
    if len(rejected) > shown:
        lines.append(f"... and {len(rejected) - shown} more rejected plans (-v lists them; recommendations.json has all)")
    return lines


REWRITE_STATUS = {"equal": "equal to the row-wise values on a sample; measured by the vectorise recipe",
                  "differs": "REJECTED, the values change", "unsupported": "not rewritten"}


def rewrites_section(row_functions: list[dict]) -> list[str]:
    """Each row function advisor found, its verdict, and its rewrite as a diff against the user's."""
    if not row_functions:
        return []
    lines = ["", "## Row functions", ""]
    for function in row_functions:
        detail = f": {function['detail']}" if function.get("detail") else ""
        lines.append(f"- `{function['where']}` {function['name']}: {REWRITE_STATUS[function['status']]}{detail}")
        if function.get("diff"):
            lines += ["", "```diff", function["diff"].rstrip(), "```", ""]
    return lines


def writes_section(writes: Optional[list], sandboxed: bool = False) -> list[str]:
    """What a script wrote in a run: in its copy of the machine (every path, anywhere), or, run
    unsandboxed, under its folder, kept in advisor's scratch instead."""
    if not writes:
        return []
    where = ("Each run ran in its own copy of the machine: these writes, anywhere on it, went to the run's "
             "scratch folder, and the processes it started ended with it; your files are as they were:"
             if sandboxed else
             "Each run's writes under the script's folder went to advisor's scratch folder, not yours "
             "(its later reads found them there); your files are as they were:")
    return ["", "## What the script wrote", "", where, ""] + [f"- `{path}`" for path in writes]


def ended_section(names: Optional[list]) -> list[str]:
    """The processes a script's run left running at its end, which ended with it."""
    if not names:
        return []
    counted = {name: names.count(name) for name in sorted(set(names))}
    listed = ", ".join(f"{name}" + (f" x{count}" if count > 1 else "") for name, count in counted.items())
    return ["", f"The script started processes that were still running when its run ended ({listed}): they were "
                "ended with the run, as every process of a run is."]


def write_results(payload: dict, diagnosis_text: str, folder: Path) -> Path:
    """Writes recommendations.json, report.md and the plots into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    write_whole(folder / "recommendations.json", json.dumps(payload, indent=2, default=str))
    figures = write_plots(payload, folder)
    report = [
        f"# advisor: {payload['workload']}",
        "",
        f"Session of {payload['started']} ({payload['duration_s']:.0f} s), fingerprint `{payload['fingerprint']}`.",
        "",
        "## Diagnosis",
        "",
        "```",
        diagnosis_text,
        "```",
        "",
        "## Recommendations",
        "",
        "```",
        render_recommendations(payload),
        "```",
        "",
        f"Recipes tried: {', '.join(payload['recipes_tried']) or 'none'}.",
    ]
    report += [f"- {name} not tried: {why}" for name, why in payload["recipes_skipped"].items()]
    report += rewrites_section(payload.get("row_functions", []))
    seen = payload["baseline"]["measurement"].get("environment") or {}
    report += writes_section(seen.get("writes"), bool(seen.get("sandboxed")))
    report += ended_section(seen.get("ended_processes"))
    report += ["", "## Plots", ""] + [f"![{figure.stem}]({figure.name})" for figure in figures]
    write_whole(folder / "report.md", "\n".join(report) + "\n")
    return folder


def write_plots(payload: dict, folder: Path) -> list[Path]:
    """The session's plots, as PNG files in `folder`: where a step's time (or a service's
    latency) goes, the speedups with their intervals, the search's history."""
    from advisor import plots

    figures = [plots.plot_history(payload, folder / "history.png")]
    if payload["recommendations"]:
        figures.insert(0, plots.plot_speedups(payload, folder / "speedup.png"))
        if payload["baseline"].get("latency_ms"):  # a service: where its latency lies, not a step's parts
            figures.insert(0, plots.plot_latency(payload, folder / "latency.png"))
        if payload.get("load_curve"):
            figures.insert(0, plots.plot_load_curve(payload, folder / "load_curve.png"))
        else:
            figures.insert(0, plots.plot_breakdown(payload, payload["baseline"]["step_breakdown_ms"], folder / "breakdown.png"))
    return figures


def advice_lines(advice: list[dict]) -> list[str]:
    lines = []
    for item in advice:
        label = "rewritten, to be measured" if item.get("status") == "equal" else "advice, UNVERIFIED"
        lines += ["", f"{label}: the row-wise call at {item['where']} (`{item['code']}`) takes "
                      f"{item['share_of_transform']:.0%} of the transform; its row function is at {item['row_function']}.",
                  item["suggestion"], f"({item['note']})"]
    return lines
