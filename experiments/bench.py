"""advisor against what users do today, side by side, in one run: the benchmark suite.

    python -m experiments.bench [NAME ...] [--quick] [--rounds 5] [--aa-repeats 20] [--grid-cap 150] [--out bench-results] [--resume]

For each reference workload (configs/<name>.yaml), five ways to pick a plan:

- default: the config as the user runs it today;
- blog advice: every recipe's textbook setting applied blindly, whatever the bottleneck
  (num_workers = cores, AMP on, compile on; for pandas: the pyarrow parser, Arrow dtypes,
  only the columns used; for a service: bf16, compile and inference_mode);
- random search: uniform samples of the knobs advisor searched, with advisor's trial budget;
- advisor: `advisor optimize` end to end, its verified #1 (the default when nothing verified);
- oracle: every distinct plan of those knobs, measured once each (an exhaustive grid).

The searches pick from single trial runs, as their users would, and none may pick a plan over
the memory budget or with changed results. Then every picked plan is measured again, interleaved
with the default round by round in fresh processes, so all of them are compared at the same
moment: those ratios fill the table. For input-bound jobs the default fed one reused batch (no
input work at all: the ideal) joins those rounds, giving the share of the gap to it recovered.
Calibration: the verifier on the default plan against itself (A/A), and each verified claim
against that independent re-measurement.

`--quick` benches quickstart and prep_stall (about 10 minutes on 2 cores); the full run, every
reference, takes hours. The grids of memory_budget, serve_batching and over_budget hold 1,040,
1,088 and 504 plans; `--grid-cap 150` (the default) measures 150 of them, drawn at random.
Each workload's row is written to <out>/bench.json as it finishes; `--resume` keeps the rows a
cut-off run wrote there (same workloads, same --rounds) and benches only the rest, so the full run
may span sittings: each row carries when it finished, and the header says the run was resumed.
Writes <out>/bench.md, bench.csv, bench.json and bench.png.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import platform
import random
import time
from pathlib import Path
from typing import Callable, Optional

from advisor import search
from advisor.config import MOST_PAIRS, AdvisorConfig
from advisor.harness import run_measurement
from advisor.kinds import kind_of, load_config
from advisor.measure import Measurement
from advisor.plan import active_recipes, combined_risk, effective, plan_key, unique
from advisor.recipes import by_name
from advisor.session import SessionResult, measure_with, optimize, round_measures
from advisor.session.gate import compare_outputs, worst_numerics
from advisor.session.planning import search_space
from advisor.session.verification import gap_recovered, more_requests
from advisor.verdict import paired_interval
from advisor.verify import ANSWERED, OBJECTIVE, Rounds, interleave
from experiments import config_path
from experiments.agreement import loops_ratio, same_rounds, speedups
from experiments.calibrate import aa_verdicts

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ("quickstart", "fetch_stall", "prep_stall", "compute_bound", "memory_budget", "overhead", "shard_open",
         "remote_fetch")
PIPELINES = ("parse_bound", "rowwise", "over_budget")
SERVICES = ("serve_encoder", "serve_cold", "serve_batching")  # judged on p95: every ratio is a ratio of p95s
QUICK = ("quickstart", "prep_stall")
AA_CONFIG = "prep_stall"  # the cheapest reference run (about 0.5 s): 20 A/A verifications in ~2 minutes
ARMS = ("default", "blog", "random", "advisor", "oracle")
ARM_TITLES = {"default": "default", "blog": "blog advice", "random": "random search", "advisor": "advisor",
              "oracle": "oracle (grid)"}
BLOG_RECIPES = {"train": ("dataloader", "amp", "compile"), "pipeline": ("arrow_engine", "dtypes", "columns"),
                "infer": ("amp", "compile", "inference_mode")}
INPUT_BOUND = ("input-fetch", "input-prep")
Progress = Callable[[str], None]


# ---------------------------------------------------------------- the plans each alternative picks

def blog_plan(baseline: dict, context) -> dict:
    """Every blog-advice recipe that can run here, at its textbook setting, on top of the default."""
    plan = dict(baseline)
    for name in BLOG_RECIPES[context.kind]:
        recipe = by_name(name)
        if recipe.why_not(context) is None:
            plan.update(recipe.textbook(context))
    return plan


def grid(space: dict, baseline: dict) -> list[dict]:
    """Every distinct plan of the space (plans differing only in keys that do nothing count once),
    the default first."""
    return unique([baseline] + [{**baseline, **params} for params in search.every_plan(space)])


def capped(plans: list[dict], cap: int, seed: int) -> list[dict]:
    """The grid itself when it holds at most `cap` plans; otherwise the default and `cap - 1` of
    the others drawn at random (seeded), so that a grid of a thousand plans costs minutes, not hours."""
    if cap <= 0 or len(plans) <= cap:
        return plans
    return plans[:1] + random.Random(seed).sample(plans[1:], cap - 1)


def pick(trials: list[search.TrialResult], baseline: dict, config: AdvisorConfig) -> dict:
    """The fastest trial that is within the memory budget and leaves results unchanged (the
    default when none beats it): what a user of that search would adopt."""
    base_run = next((t.measurement for t in trials if plan_key(t.plan) == plan_key(baseline)), None)
    for trial in sorted((t for t in trials if t.feasible), key=lambda t: t.samples_per_s, reverse=True):
        if base_run is None or not base_run.ok:
            return trial.plan
        risk = combined_risk(active_recipes(trial.plan, baseline))
        if compare_outputs(trial.measurement, base_run, risk, config).passed:
            return trial.plan
    return baseline


# ---------------------------------------------------------------- paired ratios

def paired_ratio(runs: list[Measurement], against: list[Measurement],
                 basis: str = OBJECTIVE) -> tuple[float, float, float]:
    """Geometric-mean ratio of throughputs (or the figure `basis` names) measured in the same
    rounds, with its 95% interval: a verification's ratios (`Rounds.ratios`), a run without the
    figure left out."""
    ratios = [ratio for ratio in Rounds(against, {"plan": runs}).ratios("plan", basis) if ratio > 0]
    if not ratios:
        return math.nan, math.nan, math.nan
    return (1.0, 1.0, 1.0) if runs is against else paired_interval(ratios)


# ---------------------------------------------------------------- one workload

PINNING_BUDGET_S = 3600.0  # the time budget under --precision: the rounds that pin a claim, not the clock, stop it


def scratch_config(name: str, folder: Path, precision: Optional[float] = None) -> AdvisorConfig:
    """The reference config with its Optuna study in a fresh journal of the bench's own; with
    `precision`, its claims pinned to that share either side (`search.precision`), as many
    rounds as that takes up to MOST_PAIRS, within PINNING_BUDGET_S at least."""
    config = load_config(config_path(name))
    journal = folder / f"{name}.optuna-journal"
    journal.unlink(missing_ok=True)
    pinned = {} if precision is None else {
        "precision": precision, "max_pairs": MOST_PAIRS, "time_budget_s": max(config.search.time_budget_s, PINNING_BUDGET_S)}
    return dataclasses.replace(config, search=dataclasses.replace(config.search, storage=str(journal), **pinned))


def run_search(study, space, baseline, measure, budget, config, progress) -> tuple[list[search.TrialResult], float]:
    started = time.time()
    search.run_trials(study, space, baseline, measure, budget, math.inf, config.constraints.max_memory_mb, progress)
    return search.finished_trials(study), time.time() - started


def run_grid(plans: list[dict], measure, config, progress) -> tuple[list[search.TrialResult], float]:
    started, trials = time.time(), []
    for number, plan in enumerate(plans):
        run = measure(plan)
        trials.append(search.TrialResult(number, plan, run, search.is_feasible(run, config.constraints.max_memory_mb)))
        best = max((t.samples_per_s for t in trials), default=0.0)
        progress(f"  grid {number + 1}/{len(plans)}: {run.samples_per_s:,.0f}/s  (best {best:,.0f}/s)")
    return trials, time.time() - started


def bench_workload(name: str, rounds: int, folder: Path, progress: Progress, grid_cap: int = 0,
                   precision: Optional[float] = None) -> dict:
    config = scratch_config(name, folder, precision)
    measure = measure_with(config)
    indented = lambda line: progress("  " + line.strip())  # noqa: E731

    progress(f"{name}: advisor optimize")
    result: SessionResult = optimize(config, indented)
    advisor_s = result.finished - result.started
    top = next((r for r in result.recommendations if r.verified), None)
    baseline = result.baseline
    claim = {"speedup": top.speedup, "interval": list(top.interval), "memory_fix": result.memory_fix, "plan": top.plan,
             "kind": config.kind, "config": str(config.path), "rounds": top.rounds, "basis": top.speedup_basis} if top else None
    replay = None
    if claim and not claim["memory_fix"]:
        replay = (replay_in_plain_loop(name, claim, rounds, progress) if claim["kind"] == "train"
                  else replay_beside_session(name, round_measures(config), baseline, claim, rounds, progress,
                                             round_measures(more_requests(config)) if config.workload.SERVED else None,
                                             config.search.pairs))
    space = search_space([by_name(n) for n in result.chosen], result.context)
    budget = result.trials_run

    random_trials, random_s, grid_trials, grid_s, grid_size = [], 0.0, [], 0.0, 0
    if space:
        progress(f"{name}: random search, {budget} trials (advisor's budget)")
        study = search.random_study({key: baseline[key] for key in space}, seed=config.measure.seed)
        random_trials, random_s = run_search(study, space, baseline, measure, budget, config, indented)
        every = grid(space, baseline)
        plans, grid_size = capped(every, grid_cap, config.measure.seed), len(every)
        progress(f"{name}: exhaustive grid, {len(plans)} plans" if len(plans) == grid_size else
                 f"{name}: grid, {len(plans)} of its {grid_size:,} plans at random (--grid-cap)")
        grid_trials, grid_s = run_grid(plans, measure, config, indented)

    chosen = {
        "default": baseline,
        "blog": blog_plan(baseline, result.context),
        "random": pick(random_trials, baseline, config),
        "advisor": top.plan if top else baseline,
        "oracle": pick(grid_trials, baseline, config),
    }
    input_bound = any(d.bottleneck in INPUT_BOUND and d.severity in ("high", "moderate") for d in result.diagnoses)
    arm_runs = measure_arms(chosen, config, rounds, input_bound, progress, name)
    summary = summarize(name, config, result, chosen, arm_runs, claim, {
        "advisor": (budget, advisor_s), "random": (len(random_trials), random_s), "oracle": (len(grid_trials), grid_s),
    })
    summary["costs"]["oracle"]["of"] = grid_size
    summary["repeated_plans"] = {"advisor": repeated_plans(result.trials), "random": repeated_plans(random_trials)}
    best_grid = max((t.measurement.samples_per_s for t in grid_trials if t.feasible and t.measurement.ok), default=0.0)
    summary["to_grid_best"] = {"advisor": trials_to_reach(result.trials, best_grid),
                               "random": trials_to_reach(random_trials, best_grid)} if best_grid else None
    if config.workload.SERVED and config.objective != "capacity":
        summary["capacity"] = capacity_of(config, chosen, arm_runs["default"], rounds, progress, name)
    summary.update(rounds=rounds, replay=replay, finished=time.strftime("%Y-%m-%d %H:%M"), precision=precision)
    return summary


def capacity_of(config: AdvisorConfig, chosen: dict, default_runs: list[Measurement], rounds: int, progress: Progress,
                name: str) -> dict:
    """A service's capacity under a p95 SLO, the default's and advisor's picked plan's, paired
    round by round: the highest Poisson rate within the config's constraints.p95_ms or, where
    it sets none, twice the default's p95 measured in the rounds above (the SLO a user would
    hold today's service to, with room)."""
    p95s = [r.latency["p95_ms"] for r in default_runs if r.ok and r.latency]
    slo = config.constraints.p95_ms or (2 * sum(p95s) / len(p95s) if p95s else None)
    if not slo:
        return {}
    asked = dataclasses.replace(config, search=dataclasses.replace(config.search, objective="capacity"),
                                constraints=dataclasses.replace(config.constraints, p95_ms=slo))
    measure, measure_reference = round_measures(asked)
    progress(f"{name}: capacity within {slo:.1f} ms p95, the default against advisor's plan, {rounds} rounds")
    measured = interleave(chosen["default"], {"advisor": chosen["advisor"]}, measure, rounds,
                          lambda line: progress("  " + line.strip()), reference="default", measure_reference=measure_reference)
    mean = lambda runs: sum(r.samples_per_s for r in runs if r.ok) / max(1, sum(r.ok for r in runs))  # noqa: E731
    return {"slo_ms": slo, "default_per_s": mean(measured.baseline), "advisor_per_s": mean(measured.candidates["advisor"]),
            "ratio": list(paired_ratio(measured.candidates["advisor"], measured.baseline))}


def finished_rows(path: Path, names: list[str], rounds: int, precision: Optional[float] = None) -> dict[str, dict]:
    """The rows a cut-off run already wrote to bench.json, by workload: those of `names` measured
    with the same number of rounds and pinned alike (--precision; None: each config's own)."""
    if not path.exists():
        return {}
    rows = json.loads(path.read_text()).get("rows", [])
    return {row["workload"]: row for row in rows if row["workload"] in names and row.get("rounds") == rounds
            and row.get("precision") == precision}


def rows_so_far(done: list[dict], kept: dict[str, dict]) -> list[dict]:
    """What bench.json holds while a run goes on: the rows done, then the kept rows not reached
    yet, so that a run cut off again loses none of them."""
    return done + [row for name, row in kept.items() if name not in {r["workload"] for r in done}]


NEAR_GRID_BEST = 0.9  # a single trial's noise: within 10% of the grid's best single run counts as reaching it


def trials_to_reach(trials: list[search.TrialResult], best: float) -> Optional[int]:
    """How many trials (the baseline's included) a search ran until one came within 10% of the
    grid's best rate; None when none did."""
    return next((index for index, t in enumerate(sorted(trials, key=lambda t: t.number), start=1)
                 if t.feasible and t.measurement.ok and t.measurement.samples_per_s >= NEAR_GRID_BEST * best), None)


def repeated_plans(trials: list[search.TrialResult]) -> int:
    """Trials of one study that measured a plan equal in effect to an earlier trial's."""
    return len(trials) - len({plan_key(t.plan) for t in trials})


def measure_arms(chosen: dict, config, rounds: int, ideal: bool, progress: Progress,
                 name: str) -> dict[str, list[Measurement]]:
    """Each distinct picked plan, interleaved with the default, `rounds` rounds, as a
    verification's rounds are measured (`round_measures`); runs per arm. With `ideal`, the
    default's synthetic-batch run (no input work at all) joins each round too."""
    measure, measure_reference = round_measures(config)
    key_of = {arm: plan_key(plan) for arm, plan in chosen.items()}
    labels: dict[str, str] = {}  # plan key -> the first arm that picked it
    for arm in ARMS:
        labels.setdefault(key_of[arm], arm)
    candidates = {label: chosen[label] for key, label in labels.items() if label != "default"}
    ideal_plan = dict(chosen["default"])  # told apart by identity below: the same plan, another mode
    if ideal:
        candidates["ideal"] = ideal_plan

    def measure_arm(plan: dict) -> Measurement:
        if plan is ideal_plan:
            return run_measurement(config, plan, "synthetic", config.measure.steps, config.measure.timeout_s,
                                   fresh=config.measure.fresh_rounds)
        return measure(plan)

    progress(f"{name}: {len(candidates)} distinct plan(s) against the default, interleaved, {rounds} rounds")
    measured = interleave(chosen["default"], candidates, measure_arm, rounds, lambda line: progress("  " + line.strip()),
                          reference="default", measure_reference=measure_reference)
    runs = {"default": measured.baseline, **measured.candidates}
    return {**{arm: runs[labels[key_of[arm]]] for arm in ARMS}, **({"ideal": runs["ideal"]} if ideal else {})}


def summarize(name, config, result, chosen, arm_runs, claim, costs) -> dict:
    baseline, default_runs = chosen["default"], arm_runs["default"]
    budget = config.constraints.max_memory_mb
    arms = {}
    for arm in ARMS:
        runs = arm_runs[arm]
        speedup, low, high = paired_ratio(runs, default_runs)
        recipes = active_recipes(chosen[arm], baseline)
        numerics = worst_numerics(runs, default_runs, combined_risk(recipes), config) if recipes else None
        peak = max((r.peak_memory_mb for r in runs if r.ok), default=0.0)
        problem = ("failed" if not any(r.ok for r in runs)
                   else f"over budget ({peak:,.0f} MB)" if budget and peak > budget
                   else "results changed" if numerics is not None and not numerics.passed else "")
        good = [r.samples_per_s for r in runs if r.ok]
        arms[arm] = {
            "changes": {k: v for k, v in effective(chosen[arm]).items() if v != baseline.get(k)},
            "throughput": sum(good) / len(good) if good else 0.0,
            "speedup": speedup, "interval": [low, high], "peak_mb": peak, "problem": problem,
        }
        if config.workload.SERVED:  # what a claim against a saturated baseline is of (`speedup_basis`)
            arms[arm]["answered_speedup"] = paired_ratio(runs, default_runs, ANSWERED)[0]
    others = [arm for arm in ("default", "blog", "random") if not arms[arm]["problem"]]
    versus_others = {arm: list(paired_ratio(arm_runs["advisor"], arm_runs[arm])) for arm in others}
    best_other = min(versus_others, key=lambda arm: versus_others[arm][0]) if versus_others else None
    ideal_ratio = paired_ratio(arm_runs["ideal"], default_runs)[0] if "ideal" in arm_runs else None
    advisor_speedup = arms["advisor"]["speedup"]
    return {
        "workload": name,
        "unit": kind_of(config.kind).unit(config),
        "bottleneck": result.diagnoses[0].bottleneck if result.diagnoses else "none",
        "arms": arms,
        "advisor_vs_oracle": list(paired_ratio(arm_runs["advisor"], arm_runs["oracle"])),  # ratio, 95% low, high
        "advisor_vs_best_other": versus_others[best_other] if best_other else None,
        "best_other": best_other,
        "costs": {arm: {"trials": trials, "wall_s": wall} for arm, (trials, wall) in costs.items()},
        "ideal_ratio": ideal_ratio,
        # in ratios to the default, so the default's rate is 1
        "gap_recovered": None if math.isnan(advisor_speedup) else gap_recovered(advisor_speedup, 1.0, ideal_ratio),
        "claim": claim,
    }


# ---------------------------------------------------------------- output

def machine() -> str:
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 if hasattr(os, "sysconf") else 0
    import pandas
    import torch
    return (f"{model or platform.processor()}, {os.cpu_count()} cores, {memory_gb:.0f} GiB, {platform.system()}; "
            f"Python {platform.python_version()}, torch {torch.__version__}, pandas {pandas.__version__}")


def times(value: Optional[float]) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}x"


def arm_cell(row: dict, arm: str) -> str:
    entry = row["arms"][arm]
    if arm == "default":
        text = f"{entry['throughput']:,.0f} {row['unit']}"
    else:
        text = times(entry["speedup"])
    return text + (f" ✗ {entry['problem']}" if entry["problem"] else "")


def ratio_cell(ratio: Optional[list]) -> str:
    """A paired ratio with its 95% interval; a plan against itself is exactly 1."""
    if not ratio or math.isnan(ratio[0]):
        return "-"
    return times(ratio[0]) + ("" if ratio[1] == ratio[2] else f" ({ratio[1]:.2f}-{ratio[2]:.2f})")


def capacity_cell(found: Optional[dict]) -> str:
    if not found:
        return "-"
    return (f"{found['advisor_per_s']:,.0f}/s vs {found['default_per_s']:,.0f}/s within {found['slo_ms']:.0f} ms: "
            f"{ratio_cell(found['ratio'])}")


def plans_of(cost: dict) -> int:
    """How many plans the search had: more than it ran for a grid capped by --grid-cap."""
    return cost.get("of") or cost["trials"]


def cost_cell(cost: dict) -> str:
    sampled = f" of {plans_of(cost):,}" if plans_of(cost) > cost["trials"] else ""
    return f"{cost['trials']}{sampled} / {cost['wall_s'] / 60:.1f} min"


def markdown(rows: list[dict], calibration: dict, header: str) -> str:
    lines = [header, "",
             "| workload | bottleneck | default | blog advice | random search | advisor | oracle (grid) "
             "| advisor / oracle (95%) | advisor / best other (95%) | advisor trials / time | random | oracle | gap to ideal recovered "
             "| service capacity within its SLO, advisor / default (95%) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        best = f"{ratio_cell(row['advisor_vs_best_other'])} vs {ARM_TITLES[row['best_other']]}" if row["best_other"] else "-"
        gap = f"{row['gap_recovered']:.0%}" if row["gap_recovered"] is not None else "-"
        lines.append(
            f"| {row['workload']} | {row['bottleneck']} | " + " | ".join(arm_cell(row, arm) for arm in ARMS)
            + f" | {ratio_cell(row['advisor_vs_oracle'])} | {best} | "
            + " | ".join(cost_cell(row["costs"][arm]) for arm in ("advisor", "random", "oracle"))
            + f" | {gap} | {capacity_cell(row.get('capacity'))} |"
        )
    lines += ["", "Speedups are over the default, geometric means of ratios paired round by round. "
              "Trials / time: the runs each search made and its wall time (advisor's includes its diagnosis and "
              "verification). ✗: the plan breaks the memory budget or changes results; it is not counted as an alternative. "
              "Gap to ideal recovered: (advisor - 1) / (ideal - 1), the ideal being the default fed one reused batch "
              "(no input work), measured in the same rounds. Service capacity: the highest Poisson arrival rate whose "
              "p95 stays within the config's constraints.p95_ms (else twice the default's p95), the default's "
              "and advisor's plan's, paired round by round. An oracle cost of 'N of M' is a grid too large to run "
              "whole: the default and N - 1 of its M plans drawn at random (seeded, --grid-cap), so advisor may beat it."]
    lines += ["", "| calibration | result |", "|---|---|"]
    aa = calibration.get("aa")
    if aa:
        lines.append(f"| A/A called faster, lower end above 1.0 ({aa['config']}, {aa['pairs']} pairs each) | "
                     f"{aa['verified']} of {aa['repeats']} (speedups {aa['min']:.3f}x-{aa['max']:.3f}x) |")
    for claim in calibration.get("claims", []):
        same = (f" (advisor's measurement in the same rounds {claim['advisor_now']:.2f}x; advisor / plain "
                f"{ratio_cell(claim['loops'])})" if claim.get("loops") else "")
        over = f" over {claim['rounds']} rounds" if claim.get("rounds") else ""
        width = (f" ({claim['claimed_interval'][0]:.2f}-{claim['claimed_interval'][1]:.2f}x"
                 + (f", {claim['claim_rounds']} rounds)" if claim.get("claim_rounds") else ")")) if claim.get("claimed_interval") else ""
        lines.append(f"| reproduction, {claim['workload']}: claimed {claim['claimed']:.2f}x{width}, "
                     f"{claim.get('source', 're-measured')} {claim['measured']:.2f}x{over}{same} | error {claim['error']:+.1%} |")
    for row in rows:
        reached = row.get("to_grid_best")
        if reached:
            said = {arm: f"{n} trial(s)" if n else "never" for arm, n in reached.items()}
            lines.append(f"| trials until one came within 10% of the grid's best, {row['workload']} | "
                         f"advisor {said['advisor']}, random search {said['random']} |")
    repeats = {arm: sum(row.get("repeated_plans", {}).get(arm, 0) for row in rows) for arm in ("advisor", "random")}
    lines.append(f"| trials that measured a plan equal in effect to one measured before, in one study | "
                 f"advisor {repeats['advisor']}, random search {repeats['random']} |")
    if calibration.get("claims"):
        errors = [abs(c["error"]) for c in calibration["claims"]]
        lines.append(f"| reproduction, mean absolute error over {len(errors)} claim(s) | {sum(errors) / len(errors):.1%} "
                     f"(worst {max(errors):.1%}) |")
    return "\n".join(lines) + "\n"


def write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["workload", "bottleneck", "unit", "default_throughput"]
                        + [f"{arm}_speedup" for arm in ARMS] + [f"{arm}_problem" for arm in ARMS]
                        + ["advisor_vs_oracle", "advisor_vs_oracle_low", "advisor_vs_oracle_high",
                           "advisor_vs_best_other", "advisor_vs_best_other_low", "advisor_vs_best_other_high", "best_other",
                           "advisor_trials", "advisor_wall_s", "random_trials", "random_wall_s",
                           "oracle_trials", "oracle_wall_s", "grid_size", "gap_recovered", "claimed_speedup"])
        for row in rows:
            arms, costs = row["arms"], row["costs"]
            writer.writerow(
                [row["workload"], row["bottleneck"], row["unit"], f"{arms['default']['throughput']:.1f}"]
                + [f"{arms[arm]['speedup']:.4f}" for arm in ARMS] + [arms[arm]["problem"] for arm in ARMS]
                + [f"{value:.4f}" for value in row["advisor_vs_oracle"]]
                + ([f"{value:.4f}" for value in row["advisor_vs_best_other"]] if row["best_other"] else ["", "", ""])
                + [row["best_other"] or ""]
                + [value for arm in ("advisor", "random", "oracle") for value in (costs[arm]["trials"], f"{costs[arm]['wall_s']:.1f}")]
                + [plans_of(costs["oracle"])]
                + ["" if row["gap_recovered"] is None else f"{row['gap_recovered']:.4f}",
                   "" if row["claim"] is None else f"{row['claim']['speedup']:.4f}"]
            )


def plot(rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    colors = {"blog": "#e07b39", "random": "#999999", "advisor": "#2e8b57", "oracle": "#3c78b4"}
    shown = ("blog", "random", "advisor", "oracle")
    fig, (speed, cost) = plt.subplots(1, 2, figsize=(12, 1.1 * len(rows) + 2.5), gridspec_kw={"width_ratios": [3, 2]})
    height = 0.8 / len(shown)
    for index, row in enumerate(reversed(rows)):
        for offset, arm in enumerate(shown):
            entry = row["arms"][arm]
            y = index + (len(shown) / 2 - offset - 0.5) * height
            low, high = entry["interval"]
            speed.barh(y, entry["speedup"], height=height, color=colors[arm], alpha=0.35 if entry["problem"] else 1.0,
                       xerr=[[max(0.0, entry["speedup"] - low)], [max(0.0, high - entry["speedup"])]],
                       label=ARM_TITLES[arm] if index == 0 else None, capsize=2)
        for offset, arm in enumerate(("random", "advisor", "oracle")):
            y = index + (1 - offset) * 0.8 / 3
            cost.barh(y, row["costs"][arm]["wall_s"] / 60, height=0.8 / 3, color=colors[arm])
    labels = [row["workload"] for row in reversed(rows)]
    speed.axvline(1.0, color="#555555", linewidth=0.8)
    speed.set_xscale("log")
    speed.xaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # 0.5x 1x 2x 5x 10x ...
    speed.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}x"))
    speed.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # labelled minor ticks overlap over 3 decades
    speed.set_yticks(range(len(rows)), labels)
    speed.set_xlabel("speedup over the default (95% interval)")
    speed.set_title("What each way of tuning buys (faded: over budget or results changed)", fontsize=10)
    cost.set_yticks(range(len(rows)), labels)
    cost.set_xlabel("minutes")
    cost.set_title("Search cost (advisor: diagnosis + trials + verification)", fontsize=10)
    handles, names = speed.get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=len(shown), frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- the run

def replay_in_plain_loop(name: str, claim: dict, rounds: int, progress: Progress) -> dict:
    """A verified training claim re-measured from outside advisor, right after the session that
    made it (the host's speed drifts within minutes here): in the plain loop
    (experiments/plain_loop.py), in the same rounds as advisor's own measurement of the baseline
    and the plan (`experiments.agreement`), so that a claim's distance from the plain loop
    splits into the machine's drift since the claim (both loops moved) and a bias of the
    harness (advisor / plain, round by round, clear of 1.0). As many rounds as the claim took,
    `rounds` at least, and even: a pair of rounds puts each run before each other once (`round_order`)."""
    replayed = max(rounds, claim.get("rounds") or 0)
    replayed += replayed % 2
    progress(f"{name}: its claim replayed in the plain loop and in advisor's measurement, {replayed} rounds of both")
    rates = same_rounds(Path(claim["config"]), claim["plan"], replayed, lambda line: progress("  " + line))
    ratios = speedups(rates)
    return {"measured": paired_interval(ratios["plain"])[0], "source": "plain loop", "rounds": replayed,
            "advisor_now": paired_interval(ratios["advisor"])[0], "loops": list(loops_ratio(rates))}


def replay_beside_session(name: str, measures: tuple[Callable, Optional[Callable]], baseline: dict, claim: dict,
                          rounds: int, progress: Progress, longer: Optional[tuple[Callable, Optional[Callable]]] = None,
                          pairs: int = 5) -> dict:
    """A verified service or pipeline claim (no plain runner for these yet) re-measured right
    after its session, as `replay_in_plain_loop` does a training claim's: the default and the
    claimed plan interleaved, as a verification's rounds are measured (`measures`: the config's
    `round_measures`), as many rounds as the claim took, `rounds` at least, each paired ratio
    read on the figure the claim is of (`speedup_basis`). `longer`: how rounds past `pairs`
    measure, where the claim's did so (a service's on its objective serve twice the requests:
    `Stopping.longer_runs`). The bench's own 5 rounds, after the searches and the grid,
    were a noisier and later check than the claim they checked."""
    replayed, basis = max(rounds, claim.get("rounds") or 0), claim.get("basis") or OBJECTIVE
    progress(f"{name}: its claim re-measured against the default right after its session, {replayed} rounds")
    longer = longer if basis == OBJECTIVE and replayed > pairs else None
    stages = [(measures, min(replayed, pairs)), (longer, replayed - pairs)] if longer else [(measures, replayed)]
    measured, done = None, 0
    for (measure, measure_reference), count in stages:
        more = interleave(baseline, {"claim": claim["plan"]}, measure, count, lambda line: progress("  " + line.strip()),
                          reference="default", rounds_before=done, rounds_total=replayed,
                          measure_reference=measure_reference)
        measured, done = more if measured is None else measured.then(more), done + count
    speedup, low, high = paired_ratio(measured.candidates["claim"], measured.baseline, basis)
    return {"measured": speedup, "interval": [low, high], "rounds": replayed,
            "source": "re-measured after its session" + (" (requests answered a second at full load)" if basis == ANSWERED else "")}


def reproduce_claims(rows: list[dict]) -> list[dict]:
    """Each verified speed claim against its re-measurement, run with its row: training plans in
    the plain loop (`replay_in_plain_loop`); services and pipelines, which have no plain runner
    yet, beside the default in advisor's own measurement (`replay_beside_session`). A row
    written before those replays is checked against the bench's own rounds, and says so."""
    claims = []
    for row in rows:
        claim = row["claim"]
        if not claim or claim["memory_fix"]:
            continue
        answered = claim.get("basis") == ANSWERED
        found = {"workload": row["workload"], "claimed": claim["speedup"], "claimed_interval": claim["interval"],
                 "claim_rounds": claim.get("rounds"), **(row.get("replay") or {
            "measured": row["arms"]["advisor"]["answered_speedup" if answered else "speedup"],
            "source": "bench re-measurement" + (" of requests answered a second" if answered else "")})}
        claims.append({**found, "error": found["measured"] / claim["speedup"] - 1})
    return claims


def calibrate(rows: list[dict], aa_name: str, repeats: int, folder: Path, progress: Progress) -> dict:
    calibration: dict = {"claims": reproduce_claims(rows)}
    if repeats:
        config = scratch_config(aa_name, folder)
        progress(f"calibration: the default plan of {aa_name} against itself, {repeats} verifications")
        verdicts = aa_verdicts(config, repeats, config.search.pairs, lambda line: progress("  " + line))
        calibration["aa"] = {"config": aa_name, "repeats": repeats, "pairs": config.search.pairs,
                             "verified": sum(v.verified for v in verdicts),
                             "min": min(v.speedup for v in verdicts), "max": max(v.speedup for v in verdicts)}
    return calibration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"reference workloads (default: all; with --quick: {', '.join(QUICK)})")
    parser.add_argument("--quick", action="store_true", help="the quick suite: about 10 minutes on 2 cores")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the picked plans (default 5)")
    parser.add_argument("--aa-repeats", type=int, default=20, help="A/A verifications (0 skips them)")
    parser.add_argument("--aa-config", default=AA_CONFIG, help=f"the reference the A/A runs on (default {AA_CONFIG})")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results", help="where the table and plot go")
    parser.add_argument("--grid-cap", type=int, default=150,
                        help="a grid of more plans measures the default and this many - 1 at random (0: no cap; default 150)")
    parser.add_argument("--precision", type=float, default=None,
                        help=f"pin every claim to this share either side (search.precision; up to {MOST_PAIRS} rounds, "
                             "within an hour): a claim re-measured within 10%% needs about 0.05 (default: each config's own)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows a cut-off run left in <out>/bench.json and bench only the rest")
    args = parser.parse_args()
    known = TRAIN + PIPELINES + SERVICES
    names = args.names or list(QUICK if args.quick else known)
    unknown = [name for name in names + [args.aa_config] if name not in known]
    if unknown:
        parser.exit(2, f"bench: unknown workload {unknown[0]!r}; known: {', '.join(known)}\n")
    if args.rounds < 2:
        parser.exit(2, "bench: --rounds must be at least 2 (an interval needs pairs)\n")
    if args.precision is not None and not 0 < args.precision < 1:
        parser.exit(2, "bench: --precision must be a share between 0 and 1 (0.05: +-5%)\n")
    args.out.mkdir(parents=True, exist_ok=True)
    studies = args.out / "studies"
    studies.mkdir(exist_ok=True)

    started = time.time()

    def progress(line: str) -> None:
        elapsed = time.time() - started
        print(f"[{int(elapsed // 60):02d}:{int(elapsed % 60):02d}] {line}", flush=True)

    kept = finished_rows(args.out / "bench.json", names, args.rounds, args.precision) if args.resume else {}
    if kept:
        progress(f"resumed: kept {', '.join(kept)} from {args.out / 'bench.json'}")
    rows = []
    for name in names:
        rows.append(kept.get(name) or bench_workload(name, args.rounds, studies, progress, args.grid_cap, args.precision))
        (args.out / "bench.json").write_text(json.dumps({"rows": rows_so_far(rows, kept)}, indent=2, default=str))
    calibration = calibrate(rows, args.aa_config, args.aa_repeats, studies, progress)
    finished = sorted(row.get("finished", "?") for row in rows)
    header = (f"Benchmark suite{' (--quick)' if args.quick else ''}, {time.strftime('%Y-%m-%d')}, "
              + (f"resumed ({len(kept)} of {len(rows)} rows kept; rows finished {finished[0]} to {finished[-1]}), "
                 "this sitting " if kept else "")
              + f"{(time.time() - started) / 60:.0f} min in all. Machine: {machine()}."
              + (f" Claims pinned to +-{args.precision:.0%} (--precision: search.precision, up to {MOST_PAIRS} rounds)."
                 if args.precision is not None else ""))
    (args.out / "bench.json").write_text(json.dumps({"header": header, "rows": rows, "calibration": calibration},
                                                    indent=2, default=str))
    (args.out / "bench.md").write_text(markdown(rows, calibration, header))
    write_csv(rows, args.out / "bench.csv")
    plot(rows, args.out / "bench.png")
    print()
    print(markdown(rows, calibration, header))
    print(f"written: {', '.join(str(args.out / f) for f in ('bench.md', 'bench.csv', 'bench.json', 'bench.png'))}")


if __name__ == "__main__":
    main()
