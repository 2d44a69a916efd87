"""Pruning on against pruning off: the same plans, in the same order, measured twice.

    python -m experiments.pruning [NAME ...] [--plans 12] [--seed 0] [--order random|session] [--window configured|default]
                                  [--share 0.7] [--from 20] [--early 10 0.63] [--stretch 5]

For each reference training job or service (configs/<name>.yaml, default: REFERENCES), the
baseline is diagnosed once and its search space drawn: the baseline, then `--plans` distinct plans
at random (seeded). Both passes run exactly that list through `search.run_trials`, so the only
difference is the pruner (`search.BehindTheBest`). One line per reference: trial seconds off and
on, the share saved, the trials pruned, and whether the winner of the unpruned pass was still
measured whole, and won, with pruning on. The share saved counts only the pruned plans (their
whole trial in the pass off less their pruned one), so that the run-to-run noise of the plans both
passes ran whole does not pass for a saving. `--share`, `--from`, `--early` and `--stretch` try
another rule than the pruner's (PRUNE_SHARE, PRUNE_FROM_PERCENT, PRUNE_EARLY, PRUNE_STRETCH_PERCENT).
`--window default` measures each trial over the window a config without a `measure` section gets
(MeasureConfig's defaults) instead of the reference's own, shortened to keep the tests quick: a
trial's start-up and warm-up cannot be pruned, and they weigh less in a window of a user's length.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
from pathlib import Path

import optuna

from advisor import search
from advisor.config import MeasureConfig
from advisor.diagnosis import collect_evidence
from advisor.kinds import load_config
from advisor.plan import plan_key, unique
from advisor.session import measure_with, plan_session
from advisor.session.planning import textbook_params
from advisor.session.trials import prunable
from experiments import config_path

ROOT = Path(__file__).resolve().parent.parent
REFERENCES = ("shard_open", "memory_budget", "text_step", "fetch_stall", "quickstart", "prep_stall", "overhead",
              "compute_bound", "lightning", "hf_text", "serve_batching", "serve_encoder")


def plans_to_measure(space: dict, baseline: dict, count: int, seed: int) -> list[dict]:
    """The baseline's settings, then `count` distinct plans drawn at random (fewer if the space is smaller)."""
    rng = random.Random(seed)
    plans = [{key: baseline[key] for key in space}]
    everything = unique(search.every_plan(space) if search.space_size(space) <= search.ENUMERABLE else
                               [{k: rng.choice(search.values_of(p)) for k, p in space.items()} for _ in range(50 * count)],
                               baseline)
    rng.shuffle(everything)
    seen = {plan_key({**baseline, **plans[0]})}
    for params in everything:
        key = plan_key({**baseline, **params})
        if key not in seen and len(plans) <= count:
            seen.add(key)
            plans.append(params)
    return plans


def session_pass(config, facts, count: int, seed: int) -> list[optuna.trial.FrozenTrial]:
    """The trials a session proposes, in its order, measured whole: the baseline, each recipe's
    textbook setting, then TPE (the session's sampler, seeded), until `count` distinct plans."""
    sampler = search.make_sampler(dataclasses.replace(config, measure=dataclasses.replace(config.measure, seed=seed)))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for params in unique([{key: facts.baseline[key] for key in facts.space}, *textbook_params(facts)],
                         facts.baseline):
        study.enqueue_trial(params)
    search.run_trials(study, facts.space, facts.baseline, measure_with(config), count, math.inf,
                      config.constraints.max_memory_mb, progress=print)
    return measured(study.trials)


def measured(trials) -> list[optuna.trial.FrozenTrial]:
    """The trials that ran, in order (not those queued and never asked, nor those skipped as measured already)."""
    ran = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)
    return [t for t in trials if t.state in ran and not t.user_attrs.get(search.SKIPPED_ATTR)]


def one_pass(config, space: dict, baseline: dict, plans: list[dict], prune) -> list[optuna.trial.FrozenTrial]:
    study = optuna.create_study(direction="maximize")
    for params in plans:
        study.enqueue_trial(params)
    search.run_trials(study, space, baseline, measure_with(config), len(plans), math.inf,
                      config.constraints.max_memory_mb, progress=print, prune=prune)
    return measured(study.trials)


def trial_seconds(trial) -> float:
    if not (trial.datetime_complete and trial.datetime_start) or trial.user_attrs.get(search.SKIPPED_ATTR):
        return 0.0
    return (trial.datetime_complete - trial.datetime_start).total_seconds()


def seconds(trials) -> float:
    return sum(trial_seconds(t) for t in trials)


def saved_share(off, on) -> float:
    """The trial time pruning saved, as a share of the pass without it: each plan pruned in
    `on`, its whole trial in `off` less its pruned trial (both passes ran the same plans in the
    same order, and both lists hold only the trials that ran (`measured`): the n-th of one is the
    n-th of the other)."""
    saved = sum(trial_seconds(whole) - trial_seconds(cut) for whole, cut in zip(off, on)
                if cut.state == optuna.trial.TrialState.PRUNED)
    return saved / seconds(off)


def winner(trials) -> tuple[str, float]:
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and search.is_feasible_trial(t)]
    best = max(done, key=lambda t: t.value)
    return plan_key(best.params), best.value


def with_window(config, window: str):
    """The config as it is, or measured over the default window (steps and requests, with their warm-up)."""
    if window == "configured":
        return config
    default = MeasureConfig()
    return dataclasses.replace(config, measure=dataclasses.replace(
        config.measure, steps=default.steps, warmup_steps=default.warmup_steps,
        requests=default.requests, warmup_requests=default.warmup_requests))


def compare(name: str, plans: int, seed: int, order: str = "random", window: str = "configured") -> str:
    config = with_window(load_config(config_path(name)), window)
    facts = plan_session(config, collect_evidence(config))
    if order == "session":  # the pass off is the session's own search; the pass on replays its plans
        off = session_pass(config, facts, plans + 1, seed)
        chosen = [{key: t.user_attrs[search.PLAN_ATTR][key] for key in facts.space} for t in off]
        print(f"{name}: {len(chosen)} plans of {', '.join(facts.chosen)}, in a session's order")
    else:
        chosen = plans_to_measure(facts.space, facts.baseline, plans, seed)
        print(f"{name}: {len(chosen)} plans of {', '.join(facts.chosen)}")
        off = one_pass(config, facts.space, facts.baseline, chosen, prune=lambda plan: False)
    on = one_pass(config, facts.space, facts.baseline, chosen, prune=prunable(config, facts.baseline))
    pruned = [t for t in on if t.state == optuna.trial.TrialState.PRUNED]
    best_off, rate_off = winner(off)
    best_on, rate_on = winner(on)
    kept = not any(plan_key(t.params) == best_off for t in pruned)
    saved = saved_share(off, on)
    return (f"| {name} | {len(chosen)} | {seconds(off):.1f} | {seconds(on):.1f} | {saved:.0%} | {len(pruned)} | "
            f"{'yes' if kept else 'NO'} | {'yes' if best_on == best_off else f'no ({rate_on / rate_off:.2f}x of it)'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(REFERENCES))
    parser.add_argument("--plans", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--order", choices=("random", "session"), default="random",
                        help="random: the baseline, then distinct plans drawn at random; session: the plans a "
                             "session's own search proposes (textbook settings, then TPE), in its order")
    parser.add_argument("--window", choices=("configured", "default"), default="configured",
                        help="configured: each reference's own measure section; default: the steps and requests a "
                             "config without one gets")
    parser.add_argument("--share", type=float, default=search.PRUNE_SHARE, help="prune what cannot end above this share of the best")
    parser.add_argument("--from", dest="start", type=int, default=search.PRUNE_FROM_PERCENT,
                        help="... judged from this percent of the window")
    parser.add_argument("--early", nargs=2, type=float, default=search.PRUNE_EARLY, metavar=("PERCENT", "SHARE"),
                        help="... and from this earlier percent, under this share")
    parser.add_argument("--stretch", type=int, default=search.PRUNE_STRETCH_PERCENT, help="... its pace over stretches of this percent")
    args = parser.parse_args()
    # read by BehindTheBest as it prunes
    rule = search.pruning  # the pruner reads its constants from its own module
    rule.PRUNE_SHARE, rule.PRUNE_FROM_PERCENT, rule.PRUNE_STRETCH_PERCENT = args.share, args.start, args.stretch
    rule.PRUNE_EARLY = tuple(args.early)
    print(f"the rule: prune what cannot end above {args.share:.0%} of the best finished trial's rate at its fastest pace "
          f"over {args.stretch}% of its window so far, from {args.start}% of it (from {args.early[0]:.0f}%, "
          f"{args.early[1]:.0%})")
    rows = [compare(name, args.plans, args.seed, args.order, args.window) for name in args.names]
    print("\n| reference | plans | trial s, off | trial s, on | saved | pruned | off's winner measured whole | same winner |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
