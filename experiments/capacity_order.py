"""Whether a service's capacity figure depends on the requests it served before each replay.

    python -m experiments.capacity_order [--config experiments/configs/serve_cold.yaml] [--warmups 0,32,128]
                                         [--slo-ms 103] [--rates 100,345] [--runs 1]

For each `warmup.requests` setting on the config's baseline plan: the capacity within the SLO as
the capacity objective reads it (`search.objective: capacity`: requests served one at a time,
then the bracketing replays, one after another in one service), and full open-load replays at
fixed rates, each in a service of its own (the p95 objective's run at `load.rate_per_s`). A
service that is slow for its first requests (serve_cold's model builds its table as requests
come) warmed through a capacity search's replays before each capacity run settled it first
(`advisor.kinds.infer.loop.settle`): its figure then hung on how many replays came before the
edge (2026-12-07, serve_cold, a 103 ms SLO: 890/s with no warm-up though 100/s alone broke
the SLO, 299/s warmed on 32 requests, 1,296/s on 128). Settled, the three read alike (990, 909,
1,199/s), a warm service's capacity; the fixed-rate replays still show each plan's cold start,
which is the p95 objective's to judge.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from advisor.kinds import baseline_plan, load_config
from advisor.session.bundle import round_measures

ROOT = Path(__file__).resolve().parents[1]


def capacity_figure(config, plan: dict, slo_ms: float) -> dict:
    """The capacity objective's run of `plan`: its figure, the rates it replayed and the one-at-a-time p95."""
    asked = dataclasses.replace(config, search=dataclasses.replace(config.search, objective="capacity"),
                                constraints=dataclasses.replace(config.constraints, p95_ms=slo_ms))
    run = round_measures(asked)[0](plan)
    found = run.latency.get("capacity", {}) if run.ok and run.latency else {}
    return {"per_s": found.get("per_s", 0.0), "single_p95_ms": found.get("single_p95_ms"),
            "rates": [(p["offered_per_s"], p["p95_ms"], p["saturated"]) for p in found.get("points", [])]}


def fixed_rate(config, plan: dict, rate: float) -> dict:
    """One full open-load replay of the timed requests at `rate`, in a service of its own."""
    asked = dataclasses.replace(config, load=dataclasses.replace(config.load, mode="open", rate_per_s=rate),
                                search=dataclasses.replace(config.search, objective="p95"))
    run = round_measures(asked)[0](plan)
    latency = run.latency if run.ok and run.latency else {}
    return {"p95_ms": latency.get("p95_ms"), "served_per_s": latency.get("served_per_s"), "saturated": latency.get("saturated")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "experiments" / "configs" / "serve_cold.yaml")
    parser.add_argument("--warmups", default="0,32,128", help="warmup.requests settings, comma-separated")
    parser.add_argument("--slo-ms", type=float, default=103.0, help="the p95 SLO (the bench's: twice the default's p95)")
    parser.add_argument("--rates", default="100,345", help="fixed open-load rates a second, comma-separated")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    config = load_config(args.config)
    base = baseline_plan(config)
    for run in range(args.runs):
        for warmup in (int(w) for w in args.warmups.split(",")):
            plan = {**base, "warmup.requests": warmup}
            found = capacity_figure(config, plan, args.slo_ms)
            rates = ", ".join(f"{rate:,.0f}/s {'saturated' if saturated else f'p95 {p95:.1f} ms'}"
                              for rate, p95, saturated in found["rates"])
            print(f"run {run + 1}, warmup.requests={warmup}: capacity {found['per_s']:,.0f}/s within {args.slo_ms:g} ms "
                  f"(one at a time: p95 {found['single_p95_ms'] or 0:.1f} ms; replayed in turn: {rates})", flush=True)
            for rate in (float(r) for r in args.rates.split(",")):
                alone = fixed_rate(config, plan, rate)
                print(f"    {rate:,.0f}/s alone: p95 {alone['p95_ms'] or 0:,.1f} ms, served {alone['served_per_s'] or 0:,.0f}/s"
                      f"{', saturated' if alone['saturated'] else ''}", flush=True)


if __name__ == "__main__":
    main()
