"""A search that stops measuring the variants of a plan that already lost clearly: the rule
(`search.dominance`), the trial loop that applies it on a real journal study, and the report's line."""

import time

import pytest
from conftest import TINY, merged, write_config

from advisor import search
from advisor.kinds import load_config
from advisor.measure import Measurement
from advisor.plan import changes_of, plan_key
from advisor.recipes import Choice, IntRange
from advisor.report import ruled_out_plan_lines
from advisor.search.dominance import dominating, losers
from advisor.session.margins import RULE_OUT_UNDER

UNDER = RULE_OUT_UNDER  # a loss past one trial's noise
SPACE = {"a": Choice((0, 1)), "b": Choice((0, 1)), "t": Choice((2, 1))}
BASELINE = {"a": 0, "b": 0, "t": 2}


def rate_of(plan: dict) -> float:
    """`t=1` costs 40% wherever it is; `a=1` gains 30%; `b` does nothing."""
    return 100.0 * (1.3 if plan["a"] else 1.0) * (0.6 if plan["t"] == 1 else 1.0)


def measure(plan: dict, **options) -> Measurement:
    return Measurement(mode="full", plan=plan, status="ok", samples_per_s=rate_of(plan))


def study_for(folder, trials: int, first=()):
    folder.mkdir()
    config = load_config(write_config(folder, merged(TINY, {"search": {"recipes": ["dataloader"], "trials": trials}})))
    return search.create_study(config, SPACE, BASELINE, {}, list(first))


def test_a_plan_that_adds_to_a_clear_loser_is_ruled_out_and_one_that_does_not_is_kept():
    rated = [(0, BASELINE, 100.0), (1, {**BASELINE, "t": 1}, 62.0), (2, {**BASELINE, "b": 1}, 78.0)]
    slow = losers(rated, BASELINE, UNDER)
    assert [(loser.number, loser.changes) for loser in slow] == [(1, {"t": 1})]  # 0.78x is within two trials' noise
    assert dominating({"a": 1, "b": 0, "t": 1}, slow, BASELINE).number == 1
    assert dominating({**BASELINE, "t": 1}, slow, BASELINE) is None, "the loser itself is not its own variant"
    assert dominating({"a": 1, "b": 1, "t": 2}, slow, BASELINE) is None
    assert changes_of({"a": 1, "b": 0, "t": 1}, BASELINE) == {"a": 1, "t": 1}
    assert losers(rated[1:], BASELINE, UNDER) == [], "nothing is ruled out before the baseline's trial has a rate"


def test_a_trial_stopped_midway_counts_at_the_most_it_could_have_ended_at():
    window = {"of": 100, "best_case": False}
    steady = {step: 40.0 for step in range(2, 12, 2)}  # 40/s over the first tenth of its window
    assert search.final_at_most(steady, window) == pytest.approx(search.reachable(steady, window) / 0.74)
    later = {step: 40.0 for step in range(2, 32, 2)}
    assert search.final_at_most(later, window) == pytest.approx(search.reachable(later, window) / 0.82)
    assert search.final_at_most({10: 30.0}, {"of": 100, "best_case": True}) == 30.0  # a service's own bound
    slow = losers([(0, BASELINE, 100.0), (4, {**BASELINE, "t": 1}, search.final_at_most(steady, window))], BASELINE, UNDER)
    assert [loser.number for loser in slow] == [4] and slow[0].ratio == pytest.approx(40.0 / 0.74 / 100)


def test_a_grid_skips_the_variants_of_a_clear_loser_and_stops_when_only_they_are_left(tmp_path):
    lines = []
    study = study_for(tmp_path / "on", 8)
    search.run_trials(study, SPACE, BASELINE, measure, 8, time.time() + 120, None, progress=lines.append, rule_out_under=UNDER)
    measured = {plan_key(t.plan) for t in search.finished_trials(study)}
    assert measured == {plan_key({"a": a, "b": b, "t": 2}) for a in (0, 1) for b in (0, 1)} | {plan_key({**BASELINE, "t": 1})}
    loser = next(t.number for t in search.finished_trials(study) if t.plan == {**BASELINE, "t": 1})
    ruled_out = search.ruled_out_trials(study)
    assert sorted(plan_key(plan) for _, plan, _, _ in ruled_out) == sorted(
        plan_key({"a": a, "b": b, "t": 1}) for a, b in ((0, 1), (1, 0), (1, 1)))
    assert {by["trial"] for _, _, by, _ in ruled_out} == {loser} and all("at most 0.60x" in why for *_, why in ruled_out)
    assert any("every plan of the space is measured or ruled out" in line for line in lines), lines

    study = study_for(tmp_path / "off", 8)  # without the rule, the grid measures every plan
    search.run_trials(study, SPACE, BASELINE, measure, 8, time.time() + 120, None)
    assert len(search.finished_trials(study)) == 8 and not search.ruled_out_trials(study)


def test_a_sampled_search_spends_its_budget_on_plans_not_ruled_out(tmp_path):
    space = {**SPACE, "n": IntRange(0, 9)}
    baseline = {**BASELINE, "n": 0}
    config = load_config(write_config(tmp_path, merged(TINY, {"search": {"recipes": ["dataloader"], "trials": 10}})))
    study = search.create_study(config, space, baseline, {}, [{**baseline, "t": 1}])  # the loser's single, as the session queues it
    search.run_trials(study, space, baseline, measure, 10, time.time() + 120, None, rule_out_under=UNDER)
    measured = sorted(search.finished_trials(study), key=lambda t: t.number)
    assert len({plan_key(t.plan) for t in measured}) == 10
    assert [t.plan for t in measured if t.plan["t"] == 1] == [{**baseline, "t": 1}], "no variant of the loser is measured"


def test_the_report_names_the_trials_that_ruled_plans_out():
    by = [{"trial": 4, "changes": {"t": 1}, "ratio": 0.68}, {"trial": 1, "changes": {"a": 1, "b": 1}, "ratio": 0.7}]
    payload = {"ruled_out": [{"number": n, "plan": {}, "by": by[n % 2], "reason": ""} for n in (3, 5, 6)]}
    assert ruled_out_plan_lines(payload) == [
        "3 plan(s) not measured: each adds to a plan that ran clearly slower than the baseline's trial "
        "(#1: a=1, b=1, at most 0.70x; #4: t=1, at most 0.68x); the same plans without those changes were measured instead"]
    assert ruled_out_plan_lines({**payload, "ruled_out": []}) == []


def test_a_trial_slowed_by_other_processes_is_measured_again_once_quiet_and_rules_nothing_out(tmp_path):
    """`t=1` changes nothing here, but its first run was slowed by other processes (they took 60%
    of the CPU: it read 0.5x), which would rule out every plan that adds to it, the winner among
    them: it is measured again once the machine is quiet, the quieter run kept, and nothing is
    ruled out. A quiet run is taken once."""
    from advisor.session.trials import taken_again_when_quiet

    calls, lines = [], []

    def busy_once(plan: dict, **options) -> Measurement:
        calls.append(plan)
        slowed = plan == {**BASELINE, "t": 1} and calls.count(plan) == 1
        rate = 100.0 * (1.3 if plan["a"] else 1.0) * (0.5 if slowed else 1.0)
        return Measurement(mode="full", plan=plan, status="ok", samples_per_s=rate, other_cpu_share=0.6 if slowed else 0.02)

    study = study_for(tmp_path / "quiet", 8)
    search.run_trials(study, SPACE, BASELINE, taken_again_when_quiet(busy_once, lines.append, quiet_wait_s=1.0), 8,
                      time.time() + 120, None, rule_out_under=UNDER)
    assert not search.ruled_out_trials(study) and len(search.finished_trials(study)) == 8
    assert calls.count({**BASELINE, "t": 1}) == 2 and len(calls) == 9, calls
    assert any("other processes took 60% of the CPU during this trial's run" in line for line in lines), lines
    calls.clear()
    study = study_for(tmp_path / "as-measured", 8)  # the busy run kept as it was rules out t=1's variants
    search.run_trials(study, SPACE, BASELINE, busy_once, 8, time.time() + 120, None, rule_out_under=UNDER)
    assert len(search.ruled_out_trials(study)) == 3
