"""A search that has advice early: a trial far over the bar is verified at once, the search
stops once a verified fix is not beaten for a while, and the end verifies only what could beat
it. The pieces are pure functions of trials and verdicts, tested here on made-up numbers."""

import dataclasses
import math
import re

import pytest
from conftest import TINY, needs_bf16, write_config

from advisor.kinds import load_config
from advisor.measure import Measurement
from advisor.plan import plan_key
from advisor.search import TrialResult
from advisor.session import Recommendation
from advisor.session.policies import early_candidate, plateau, stacked_singles
from advisor.session.verification import Verified, confirm_beside_fix, still_to_verify

BASELINE = {"dataloader.num_workers": 0, "dataloader.prefetch_factor": 2, "dataloader.persistent_workers": False}


def run(rate: float, losses=(1.0, 0.9, 0.8), ok: bool = True) -> Measurement:
    return Measurement("full", {}, "ok" if ok else "failed", samples_per_s=rate, losses=losses,
                       parameters=((1.0, 2.0),))


def trial(number: int, workers: int, rate: float, feasible: bool = True, **changes) -> TrialResult:
    return TrialResult(number, {**BASELINE, "dataloader.num_workers": workers, **changes}, run(rate), feasible)


def verified_at(number: int, rate: float, ok: bool = True) -> Verified:
    done = Verified(started=0.0)
    done.recommendations.append(Recommendation(
        rank=0, recipes=("dataloader",), plan={}, changes={}, speedup=2.0, interval=(1.5, 2.5), verified=ok,
        reason="", numerics={}, peak_memory_mb=0.0, snippet="", trial=number, samples_per_s=rate))
    return done


def test_a_trial_far_over_the_bar_is_verified_at_once(tmp_path):
    config = load_config(write_config(tmp_path, TINY))  # min_speedup 1.05: the early bar is 1.26x the baseline
    trials = [trial(0, 0, 100.0), trial(1, 1, 120.0)]
    assert early_candidate(trials, BASELINE, config) is None, "over the bar, but not by far"
    trials.append(trial(2, 2, 300.0))
    trials.append(TrialResult(3, {**BASELINE, "dataloader.num_workers": 3}, run(400.0, losses=(2.0, 2.0, 2.0)), True))
    assert early_candidate(trials, BASELINE, config).number == 2, "the fastest whose losses match the baseline's"
    assert early_candidate(trials[1:], BASELINE, config) is None, "no baseline trial: nothing to judge against"
    failed_base = [TrialResult(0, BASELINE, run(0.0, ok=False), False), *trials[1:]]
    assert early_candidate(failed_base, BASELINE, config) is None, "a baseline that failed: verified at the end"


def test_the_search_stops_when_a_verified_fix_is_not_beaten_for_a_while():
    trials = [trial(0, 0, 100.0), trial(1, 2, 250.0), trial(2, 4, 300.0), trial(3, 8, 290.0), trial(4, 6, 310.0)]
    assert plateau(trials, None, 2, 1.05) == "", "nothing verified: the search goes on"
    assert plateau(trials, 1, 3, 1.05) == "", "two trials since the best: not yet"
    said = plateau(trials, 1, 2, 1.05)
    assert said.startswith("the search stops") and "last 2 trials" in said, "310 is not 1.05x over 300"
    assert plateau(trials + [trial(5, 7, 400.0)], 1, 2, 1.05) == "", "a clearly faster plan restarts the count"
    assert plateau(trials + [trial(5, 7, 900.0, feasible=False)], 1, 3, 1.05).startswith("the search stops"), \
        "an infeasible plan beats nothing"
    assert plateau(trials, 1, 0, 1.05) == "", "patience 0: never stop early"
    assert plateau(trials, 1, 3, 1.05, verified_rate=300.0).startswith("the search stops"), \
        "300 and 310/s are no progress over the fix verified at 300/s: the last 3 trials found nothing"
    assert plateau(trials, 1, 3, 1.05, verified_rate=200.0) == "", "verified under its trial: the trial's rate counts"


def test_the_end_verifies_only_what_could_beat_a_fix_already_verified():
    trials = [trial(0, 0, 100.0), trial(1, 2, 200.0), trial(2, 4, 215.0), trial(3, 3, 260.0), trial(4, 5, 205.0)]
    candidates = sorted(trials[1:], key=lambda t: -t.samples_per_s)
    left, passed_over = still_to_verify(candidates, trials, verified_at(1, 210.0), 3, BASELINE)
    assert [t.number for t in left] == [3], "#2 and #4 are within 1.2x of #1's verified 210/s; #1 is judged"
    assert [r.trial for r in passed_over] == [2], "#2 ran faster than the fix in its trial: said why it was not verified"
    assert "1.02x the verified fix (trial #1) in its trial, under the 1.2x" in passed_over[0].reason
    left, passed_over = still_to_verify(candidates, trials, verified_at(1, 230.0), 3, BASELINE)
    assert [t.number for t in left] == [3], "260/s is 1.13x of 230/s: under 1.2x, yet the fastest needs only 1.1x"
    assert passed_over == [], "none other ran faster than the fix"
    trials.append(trial(5, 6, 250.0))
    candidates = sorted(trials[1:], key=lambda t: -t.samples_per_s)
    left, passed_over = still_to_verify(candidates, trials, verified_at(1, 225.0), 3, BASELINE)
    assert [t.number for t in left] == [3], "260/s clears 1.1x of 225/s as the fastest; 250/s, second, needs 1.2x"
    assert [r.trial for r in passed_over] == [5] and "under the 1.2x" in passed_over[0].reason
    left, passed_over = still_to_verify(candidates, trials, verified_at(1, 245.0), 3, BASELINE)
    assert left == [] and [r.trial for r in passed_over] == [3, 5], "260/s is under 1.1x of 245/s"
    assert "under the 1.1x" in passed_over[0].reason
    left, passed_over = still_to_verify(candidates, trials, verified_at(1, 210.0, ok=False), 3, BASELINE)
    assert [t.number for t in left] == [3, 5, 2], "the early check verified nothing, and took none of the 3 places"
    assert [r.trial for r in passed_over] == [4] and "search.verify_top" in passed_over[0].reason
    assert [t.number for t in still_to_verify(candidates, trials, Verified(0.0), 3, BASELINE)[0]] == [3, 5, 2]
    left, passed_over = still_to_verify(candidates, trials, Verified(0.0), 0, BASELINE)
    assert left == [] and [r.trial for r in passed_over] == [3, 5, 2, 4, 1], "verify_top 0: trials only, each one said"
    assert "search.verify_top is 0" in passed_over[0].reason


def test_an_early_fix_takes_no_place_of_verify_top_and_no_faster_trial_goes_unsaid():
    """verify_top 1 on a fetch-bound job: the early fix (#1, 2.31x) is verified during the
    search; #2, twice as fast in its trial, still gets the one place at the end, and a third,
    left out by verify_top, is listed with why."""
    trials = [trial(0, 0, 100.0), trial(1, 2, 231.0), trial(2, 6, 504.0), trial(3, 8, 480.0)]
    candidates = sorted(trials[1:], key=lambda t: -t.samples_per_s)
    left, passed_over = still_to_verify(candidates, trials, verified_at(1, 231.0), 1, BASELINE)
    assert [t.number for t in left] == [2], "the fastest candidate is verified: the early fix used no place"
    assert [r.trial for r in passed_over] == [3] and "raise it to verify this one too" in passed_over[0].reason


SERVICE = {"amp.dtype": None, "inference_mode.enabled": False, "threads.inter_op": 2, "compile.mode": None}
SINGLES = {"amp": {**SERVICE, "amp.dtype": "bfloat16"}, "inference_mode": {**SERVICE, "inference_mode.enabled": True},
           "threads": {**SERVICE, "threads.inter_op": 1}, "compile": {**SERVICE, "compile.mode": "default"}}


def measured(number: int, params: dict, rate: float, feasible: bool = True) -> TrialResult:
    return TrialResult(number, {**SERVICE, **params}, run(rate), feasible)


def test_the_recipes_not_shown_to_lose_alone_are_tried_together():
    trials = [measured(0, {}, 100.0), measured(1, SINGLES["amp"], 93.0), measured(2, SINGLES["inference_mode"], 150.0),
              measured(3, SINGLES["threads"], 85.0)]
    assert stacked_singles(trials, SINGLES, SERVICE) is None, "compile has no trial yet"
    trials.append(measured(4, SINGLES["compile"], 400.0, feasible=False))
    assert stacked_singles(trials, SINGLES, SERVICE) == {**SERVICE, "amp.dtype": "bfloat16", "inference_mode.enabled": True}, \
        "amp at 0.93x is within a trial's noise; threads at 0.85x lost; compile's trial was infeasible"
    assert stacked_singles(trials, SINGLES, SERVICE, floor=1.05) is None, "only inference_mode clears 1.05x: nothing to stack"
    assert stacked_singles(trials[1:], SINGLES, SERVICE) is None, "no baseline trial: nothing to judge against"
    shared = {**SINGLES, "threads": {**SERVICE, "threads.inter_op": 1, "amp.dtype": "float16"}}
    trials[3] = measured(3, shared["threads"], 140.0)
    assert stacked_singles(trials, shared, SERVICE)["amp.dtype"] == "float16", "the faster trial's setting holds"


def test_a_candidate_is_run_again_beside_the_verified_fix_before_its_verification():
    """#3 beat the fix by 1.3x in its trial; run again right after the fix it is 1.04x, so it
    is not verified (a rejection says why); #4 keeps its lead beside the fix and goes on."""
    trials = [trial(0, 0, 100.0), trial(1, 2, 200.0), trial(3, 3, 260.0), trial(4, 5, 250.0)]
    again = {2: 200.0, 3: 208.0, 5: 240.0}  # the rate each plan runs at now, by its number of workers
    measured = []

    def measure(plan):
        measured.append(plan["dataloader.num_workers"])
        return run(again[plan["dataloader.num_workers"]])

    lines = []
    kept, screened = confirm_beside_fix(trials[2:], verified_at(1, 200.0), trials, measure, BASELINE, lines.append)
    assert [t.number for t in kept] == [4]
    assert measured == [2, 3, 2, 5], "each candidate right after the fix"
    assert [r.trial for r in screened] == [3] and "1.04x run again beside it" in screened[0].reason
    assert "1.30x the verified fix (trial #1) in its trial" in lines[0]
    assert confirm_beside_fix(trials[2:], Verified(0.0), trials, measure, BASELINE, lines.append) == (trials[2:], []), \
        "nothing verified yet: nothing to run beside"
    assert len(measured) == 4


def test_the_report_counts_pruned_trials():
    from advisor.report import render_recommendations

    payload = {"baseline": {"samples_per_s": 100.0}, "unit": "samples/s", "recommendations": [], "rejected": [], "min_speedup": 1.05,
               "trials": [{"number": 0}, {"number": 2}], "pruned": [{"number": 1, "plan": {}, "reason": "pruned: slow"}]}
    assert "1 of 3 trials pruned midway, clearly losing (trial #1)\n" in render_recommendations(payload)
    timed = {**payload, "pruned": [{**payload["pruned"][0], "unrun_s": 2.5}, {"number": 3, "plan": {}, "reason": "", "unrun_s": 1.0}],
             "pruned_unrun_s": 3.5}
    assert ("2 of 4 trials pruned midway, clearly losing (trial #1, #3): about 3.5 s of their timed windows left unrun"
            in render_recommendations(timed))
    assert "pruned" not in render_recommendations({**payload, "pruned": []})


def test_the_report_says_a_busy_machine_verified_nothing_not_that_nothing_clears_the_bar():
    from advisor.report import render_recommendations

    rec = {"rank": 1, "recipes": ["dataloader"], "plan": {}, "changes": {"dataloader.num_workers": 2}, "speedup": 2.2,
           "interval": [0.68, 7.06], "verified": False, "numerics": {}, "peak_memory_mb": 331.0, "snippet": "",
           "trial": 1, "samples_per_s": 1200.0, "compile": {}, "cache": {}, "contributions": {}, "step_breakdown_ms": {},
           "failed_runs": 0, "busy_share": 0.69, "ideal_speedup": None, "gap_recovered": None, "latency_ms": {},
           "reason": "the machine was busy: other processes took up to 69% of its CPU in 5 of 5 rounds, which "
                     "distorts the ratios; run it again on a quiet machine"}
    payload = {"baseline": {"samples_per_s": 550.0}, "unit": "samples/s", "recommendations": [rec], "rejected": [],
               "min_speedup": 1.05, "trials": [{"number": 0}, {"number": 1}], "pruned": []}
    busy = render_recommendations(payload)
    assert "nothing verified: the machine was busy" in busy and "nothing clears the bar" not in busy
    assert "not verified: the machine was busy: other processes took up to 69%" in busy
    quiet = render_recommendations({**payload, "recommendations": [{**rec, "busy_share": 0.01,
                                                                    "reason": "95% interval 0.68x-7.06x does not clear 1.05x"}]})
    assert "nothing clears the bar" in quiet and "busy" not in quiet


def test_the_report_says_which_recipe_slows_the_winner():
    from advisor.report import render_recommendations

    rec = dataclasses.replace(recommended(4, {}, 1.5, amp=(1.4, 1.2, 1.6), compile=(0.9, 0.8, 1.02), threads=(0.7, 0.6, 0.8)),
                              rank=1).to_dict()
    text = render_recommendations({"baseline": {"samples_per_s": 100.0}, "unit": "samples/s", "recommendations": [rec],
                                   "rejected": [], "min_speedup": 1.05, "trials": [{"number": 4}], "pruned": []})
    assert "amp adds 1.40x (1.20-1.60x)\n" in text
    assert "compile adds 0.90x (0.80-1.02x): not shown to help; the plan may drop it" in text
    assert "threads slows it: 1.43x faster without it (1.25-1.67x)" in text
    led = render_recommendations({"baseline": {"samples_per_s": 100.0}, "unit": "samples/s", "min_speedup": 1.05,
                                  "recommendations": [{**rec, "leads_because": "leads: trial #4, amp+threads, ran 1.43x faster"}],
                                  "rejected": [], "trials": [{"number": 4}], "pruned": []})
    assert "     leads: trial #4, amp+threads, ran 1.43x faster\n" in led and "leads:" not in text


def test_leaving_a_recipe_out_restores_only_the_keys_the_baseline_has():
    """The threads recipe also has a service's inter-op key, which a training baseline lacks:
    leaving threads out of a training winner must not look it up (it crashed the session)."""
    from advisor.plan import without_recipe

    baseline = {"dataloader.num_workers": 0, "threads.intra_op": None}
    winner = {"dataloader.num_workers": 2, "threads.intra_op": 1}
    assert without_recipe(winner, baseline, "threads") == {"dataloader.num_workers": 2, "threads.intra_op": None}
    assert without_recipe(winner, baseline, "dataloader")["dataloader.num_workers"] == 0


def test_a_plateau_first_measures_the_best_plans_neighbours():
    """The best plan's one-step moves, each knob to the next value, and only those not measured
    or queued (in effect: prefetch does nothing without workers)."""
    import optuna

    from advisor import search
    from advisor.recipes import Choice, IntRange

    space = {"dataloader.num_workers": IntRange(0, 8), "dataloader.prefetch_factor": Choice((2, 4, 8)),
             "dataloader.persistent_workers": Choice((False, True))}
    best = {"dataloader.num_workers": 8, "dataloader.prefetch_factor": 2, "dataloader.persistent_workers": True}
    steps = search.neighbours(best, space)
    assert [s for s in steps if s != best] == steps and len(steps) == 3, steps  # 7 workers; prefetch 4; not persistent
    assert {"dataloader.num_workers": 8, "dataloader.prefetch_factor": 4, "dataloader.persistent_workers": True} in steps
    assert {**best, "dataloader.prefetch_factor": 8} not in steps, "a choice of numbers moves to the option beside it"
    assert search.neighbours({"b": 64}, {"b": IntRange(16, 64, log=True)}) == [{"b": 32}], "a log range moves by 2x"
    threads = {"t": Choice((1, 2, 4, 8, 16, 32, 64))}
    assert search.neighbours({"t": 1}, threads) == [{"t": 2}] and search.neighbours({"t": 8}, threads) == [{"t": 4}, {"t": 16}]
    assert search.neighbours({"m": None}, {"m": Choice((None, "default", "max-autotune"))}) == [{"m": "default"}, {"m": "max-autotune"}], \
        "a mode is no number: every other option is one step"
    assert search.neighbours({"c": None}, {"c": Choice((None, 1000, 10000))}) == [{"c": 1000}, {"c": 10000}], "off among numbers: no order"

    study = optuna.create_study(direction="maximize")
    study.enqueue_trial({**best, "dataloader.num_workers": 7})
    first = search.unmeasured_neighbour(study, space, BASELINE, best)
    assert first == {**best, "dataloader.prefetch_factor": 4}, "7 workers is queued already"
    idle = {"dataloader.num_workers": 0, "dataloader.prefetch_factor": 2, "dataloader.persistent_workers": False}
    study.enqueue_trial({**idle, "dataloader.num_workers": 1})
    assert search.unmeasured_neighbour(study, space, BASELINE, idle) is None, \
        "without workers prefetch and persistence do nothing: no new plan one step away"


def test_the_neighbours_measured_are_those_of_the_best_at_the_plateau():
    from advisor.session.policies import neighbourhood_of

    trials = [trial(0, 0, 100.0), trial(1, 2, 200.0), trial(2, 4, 230.0)]
    first = neighbourhood_of(trials, None)
    assert first.number == 2
    noisy = trials + [trial(3, 5, 260.0)]
    assert neighbourhood_of(noisy, first).number == 2, "1.13x over it: within a trial's noise, the round stays"
    assert neighbourhood_of(noisy + [trial(4, 8, 300.0)], first).number == 4, "1.3x: a new plateau, a new round"
    assert neighbourhood_of(trials + [trial(5, 8, 900.0, feasible=False)], first).number == 2, "infeasible plans never lead"


def test_a_pruned_trial_counts_towards_the_plateau():
    """On shard_open a seed's search never reached its plateau: 5 of its 12 trials were pruned,
    and only whole trials were counted."""
    import optuna

    from advisor import search
    from advisor.session.policies import plateau

    study = optuna.create_study(direction="maximize")
    for workers, rate, state in [(0, 100.0, "COMPLETE"), (2, 300.0, "COMPLETE"), (1, 40.0, "PRUNED"), (3, 45.0, "PRUNED")]:
        trial = study.ask()
        trial.set_user_attr(search.PLAN_ATTR, {**BASELINE, "dataloader.num_workers": workers})
        trial.set_user_attr(search.MEASUREMENT_ATTR, run(rate, ok=state == "COMPLETE").to_dict())
        if state == "PRUNED":
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            trial.set_constraint(search.CONSTRAINT, 0.0)
            study.tell(trial, rate)
    assert len(search.finished_trials(study)) == 2
    with_pruned = search.finished_trials(study, pruned=True)
    assert [t.feasible for t in with_pruned] == [True, True, False, False]
    assert plateau(with_pruned, 1, 2, 1.2).startswith("the search stops") and plateau(search.finished_trials(study), 1, 2, 1.2) == ""


def test_the_diagnosis_full_run_is_the_baseline_trial_when_measured_alike(tmp_path):
    """Without a memory budget a training trial of the baseline is the diagnosis's full run
    again (plan, mode, steps, limits): trial #0 takes that run, once; every other call measures."""
    from advisor.evidence import Evidence
    from advisor.session.trials import baseline_trial_is_diagnosed, with_first_run

    evidence = Evidence(full=run(100.0), profile=run(0.0))
    assert baseline_trial_is_diagnosed(load_config(write_config(tmp_path, TINY)), evidence)
    budgeted = load_config(write_config(tmp_path, {**TINY, "constraints": {"max_memory_mb": 900}}))
    assert not baseline_trial_is_diagnosed(budgeted, evidence), "trials are capped, the diagnosis is not"
    failed = Evidence(full=run(0.0, ok=False), profile=run(0.0))
    assert not baseline_trial_is_diagnosed(load_config(write_config(tmp_path, TINY)), failed)

    measured = []
    measure = with_first_run(lambda plan, **options: measured.append(plan) or run(90.0), BASELINE, evidence.full)
    other = {**BASELINE, "dataloader.num_workers": 2}
    assert measure(other).samples_per_s == 90.0
    first = measure(dict(BASELINE))
    assert first.samples_per_s == 100.0 and first.plan == BASELINE, "the diagnosis's run, as the baseline's trial"
    assert measure(dict(BASELINE)).samples_per_s == 90.0, "only once: later calls measure"
    assert measured == [other, BASELINE]


def recommended(trial_number: int, plan: dict, speedup: float, verified: bool = True, **shares) -> Recommendation:
    """A recommendation whose recipes are `shares`' keys, each (factor, low, high) of #1 over itself without it."""
    return Recommendation(
        rank=0, recipes=tuple(shares) or ("amp",), plan=plan, changes={}, speedup=speedup, interval=(speedup * 0.9, speedup * 1.1),
        verified=verified, reason="", numerics={}, peak_memory_mb=100.0, snippet="", trial=trial_number, samples_per_s=speedup * 100,
        contributions={name: {"factor": f, "interval": (low, high), "shown": low > 1.0, "peak_without_mb": 100.0}
                       for name, (f, low, high) in shares.items()})


def test_the_recipe_that_slows_the_winner_is_the_one_it_runs_clearly_fastest_without():
    from advisor.session.ranking import slowing_recipe

    top = recommended(4, {}, 1.5, amp=(1.4, 1.2, 1.6), threads=(0.7, 0.6, 0.8), compile=(0.9, 0.8, 0.98))
    assert slowing_recipe(top, None) == "threads", "0.7x: 1.43x faster without it, more than without compile"
    assert slowing_recipe(recommended(4, {}, 1.5, amp=(1.4, 1.2, 1.6), compile=(0.9, 0.8, 1.02)), None) is None, \
        "an interval that reaches 1x does not show the recipe slows it"
    assert slowing_recipe(top, max_memory_mb=90.0) is None, "without either, the peak (100 MB) breaks the 90 MB budget"
    needed = dataclasses.replace(top, contributions={**top.contributions, "threads": {"needed_for_budget": True, "factor": math.inf,
                                                                                       "interval": (math.inf, math.inf)}})
    assert slowing_recipe(needed, None) == "compile", "a recipe the budget needs is never dropped"


def test_the_winner_without_what_slows_it_is_verified_and_leads():
    """#4 (amp + threads) runs 1.43x faster without threads in its leave-one-out rounds: that
    plan is kept as a trial, verified, and leads; its own shares show nothing slows it, so it stays."""
    from advisor.session.ranking import without_what_slows

    plan_4, plan_7 = {"amp": 1, "threads": 1}, {"amp": 1, "threads": 0}
    first = recommended(4, plan_4, 1.5, amp=(1.4, 1.2, 1.6), threads=(0.7, 0.6, 0.8))
    other = dataclasses.replace(recommended(2, {"amp": 0, "threads": 1}, 1.1), rank=2)
    left_out = {"threads": (plan_7, [run(0.0, ok=False), run(210.0)]), "amp": ({"amp": 0, "threads": 1}, [run(100.0)])}
    kept, asked, lines = [], [], []

    def record(plan, measured):
        kept.append((plan, measured.samples_per_s))
        return TrialResult(7, plan, measured, True)

    def verify(candidates):
        asked.append([t.number for t in candidates])
        return [recommended(7, candidates[0].plan, 2.1, amp=(1.5, 1.3, 1.7))]

    def shares(ranked):
        return ranked, {}  # #7's shares come with it here: amp helps

    ranked = without_what_slows([first, other], left_out, verify, record, None, shares, lines.append)
    assert kept == [(plan_7, 210.0)], "its first run that finished, from the leave-one-out rounds"
    assert asked == [[7]] and [r.trial for r in ranked] == [7, 4, 2] and [r.rank for r in ranked] == [1, 2, 3]
    assert ranked[0].leads_because == ("leads: trial #4, amp+threads, ran 1.43x faster without threads "
                                       "(1.25-1.67x, beside it in the same rounds)")
    assert "#1 runs 1.43x faster without threads (1.25-1.67x" in lines[0] and "trial #7" in lines[0]

    def unverified(candidates):
        return [dataclasses.replace(recommended(7, candidates[0].plan, 1.2), verified=False)]

    ranked = without_what_slows([first, other], left_out, unverified, record, None, shares, lines.append)
    assert [(r.trial, r.rank) for r in ranked] == [(4, 1), (2, 2), (7, 3)], "not verified: listed after, #4 stays first"
    assert ranked[2].leads_because == ""
    already = without_what_slows([first, other], left_out, verify, lambda plan, measured: TrialResult(2, plan, measured, True),
                                 None, shares, lines.append)
    assert [r.trial for r in already] == [4, 2], "the plan's trial is a recommendation already: nothing to verify"
    assert without_what_slows([other], {}, verify, record, None, shares, lines.append) == [other], "nothing slows #1"


def test_a_run_measured_after_the_search_is_kept_as_a_trial_the_sampler_learns_from():
    from advisor import search
    from advisor.plan import plan_key
    from advisor.recipes import Choice, IntRange

    space = {"dataloader.num_workers": IntRange(0, 4), "dataloader.persistent_workers": Choice((False, True))}
    study = search.random_study({"dataloader.num_workers": 0, "dataloader.persistent_workers": False})
    plan = {**BASELINE, "dataloader.num_workers": 3, "dataloader.persistent_workers": True}
    kept = search.record_trial(study, space, plan, run(321.0), None, "beside #1")
    assert kept.number == 1 and kept.feasible and kept.samples_per_s == 321.0, "after the waiting baseline (#0)"
    again = search.finished_trials(study)
    assert [(t.number, t.plan, t.samples_per_s) for t in again] == [(1, plan, 321.0)]
    assert plan_key(plan) in search.taken_plans(study, BASELINE), "counted as measured"
    assert study.trials[1].user_attrs[search.RECORDED_ATTR] == "beside #1"
    over = search.record_trial(study, space, {**plan, "dataloader.num_workers": 4},
                               dataclasses.replace(run(500.0), peak_memory_mb=80.0), 50.0, "beside #1")
    assert not over.feasible and search.finished_trials(study)[1].feasible is False, "80 MB over the 50 MB budget: infeasible"
    study.sampler = search.optuna.samplers.TPESampler(n_startup_trials=1, seed=0)
    asked = [search.suggest(study.ask(), space) for _ in range(3)]  # the queued baseline, then TPE's picks
    assert all(set(params) == set(space) for params in asked), "its distributions are the space's: TPE samples on"


@needs_bf16
def test_a_session_ends_on_the_winner_without_the_recipe_that_slowed_it(tmp_path):
    """The whole end of a session on a real study, with a made-up measure: bf16 doubles the
    rate, one thread takes 30% off. The search's winner has both; leaving threads out of it
    runs faster, so that plan becomes trial #2, is verified and leads, and #1 stays below it."""
    import json
    import time

    from conftest import FIXTURES, merged

    from advisor import search
    from advisor.evidence import Evidence
    from advisor.plan import plan_key
    from advisor.session import Hooks, Session, conclude, plan_session
    from advisor.session.trials import trial_recorder

    config = load_config(write_config(tmp_path, merged(TINY, {"search": {"recipes": ["threads", "amp"], "trials": 2}})))
    facts = plan_session(config, Evidence.from_dict(json.loads((FIXTURES / "evidence" / "compute_bound.json").read_text())))
    both = {"threads.intra_op": 1, "amp.dtype": "bfloat16"}
    study = search.create_study(config, facts.space, {k: facts.baseline[k] for k in facts.space}, facts.to_attrs(),
                                [both])
    jitter = iter([1.0, 1.03, 0.98, 1.01, 0.99] * 40)

    def measure(plan, **options):
        rate = 100.0 * (2.0 if plan["amp.dtype"] else 1.0) * (0.7 if plan["threads.intra_op"] == 1 else 1.0)
        return dataclasses.replace(run(rate * next(jitter)), plan=plan)

    search.run_trials(study, facts.space, facts.baseline, measure, 2, math.inf, None)
    lines = []
    session = Session(config, facts, [], measure, measure, lines.append, started=time.time(), round_measure=measure,
                      round_reference=measure)
    result = conclude(session, search.finished_trials(study), record=trial_recorder(study, facts, config, Hooks()))
    first, second = result.recommendations[:2]
    assert (first.trial, first.recipes, first.verified) == (2, ("amp",), True), [r.trial for r in result.recommendations]
    assert first.speedup > 1.9 and second.trial == 1 and 1.3 < second.speedup < 1.5
    assert 0.65 < second.contributions["threads"]["factor"] < 0.75 and second.contributions["threads"]["interval"][1] < 1.0
    assert any(re.match(r"#1 runs 1\.[34]\dx faster without threads .*trial #2", line) for line in lines), "\n".join(lines)
    kept = [t for t in study.trials if t.number == 2][0]
    assert kept.user_attrs[search.RECORDED_ATTR] and kept.params == {"threads.intra_op": 2, "amp.dtype": "bfloat16"}
    assert len({plan_key(t.plan) for t in search.finished_trials(study)}) == 3, "no plan twice"


def test_a_verdict_straddling_the_bar_during_the_search_gives_way_after_search_pairs_rounds(tmp_path):
    """A trial far over the bar is verified at once, but its rounds swing (1.2x, 1.1x, 1.25x,
    0.95x, 1.0x): after `search.pairs` rounds its verdict still straddles the bar, so it stops
    there rather than grow to `search.max_pairs`, stays unjudged, and is a candidate again at the
    search's end. Where its rounds swing so (1.5x, 0.8x, 1.4x) that even `search.pairs` rounds
    would hardly decide it, it gives way at the first look."""
    import json
    import time

    from conftest import FIXTURES, merged

    from advisor.evidence import Evidence
    from advisor.session import Session, plan_session
    from advisor.session.policies import EarlyVerification

    config = load_config(write_config(tmp_path, merged(TINY, {"search": {"recipes": ["amp"], "trials": 4}})))
    facts = plan_session(config, Evidence.from_dict(json.loads((FIXTURES / "evidence" / "compute_bound.json").read_text())))
    swings = iter([120.0, 110.0, 125.0, 95.0, 100.0] * 10)
    measured_rounds = []

    def measure(plan, **options):
        measured_rounds.append(plan.get("amp.dtype"))
        return dataclasses.replace(run(next(swings) if plan.get("amp.dtype") else 100.0), plan=plan)

    lines = []
    session = Session(config, facts, [], measure, measure, lines.append, started=time.time(), round_measure=measure,
                      round_reference=measure)
    verified = Verified(time.time(), lines.append)
    base = TrialResult(0, facts.baseline, dataclasses.replace(run(100.0), plan=facts.baseline), True)
    fast = TrialResult(1, {**facts.baseline, "amp.dtype": "bfloat16"}, run(150.0), True)
    policy = EarlyVerification(session, verified)
    policy.after_trial(None, [base, fast])
    assert measured_rounds.count("bfloat16") == config.search.pairs < config.search.max_pairs, lines
    assert not verified.trial_numbers, "unjudged: a candidate again at the end"
    assert any("straddles the bar after 5 rounds" in line for line in lines), lines
    policy.after_trial(None, [base, fast])
    assert measured_rounds.count("bfloat16") == config.search.pairs, "one early verification at most"
    swings, lines[:], measured_rounds[:] = iter([150.0, 80.0, 140.0] * 10), [], []
    EarlyVerification(session, Verified(time.time(), lines.append)).after_trial(None, [base, fast])
    assert measured_rounds.count("bfloat16") == 3, lines
    assert any(line.startswith("  the rounds stop: 5 rounds (search.pairs) would hardly decide") for line in lines), lines


def test_an_early_fix_stops_at_its_verdict_and_its_rounds_go_on_at_the_end_where_it_leads(tmp_path):
    """A trial far over the bar is verified during the search at a look (1.5x, noisy: pinning
    its number to +-10% asks more rounds): the search goes on at once. At the end, where it
    still leads, its rounds go on from there (kept in the study) until its number is pinned: no
    round is run twice, and its earlier verdict gives way to the pinned one."""
    import json
    import time

    import optuna
    from conftest import FIXTURES, merged

    from advisor.evidence import Evidence
    from advisor.session import Session, plan_session
    from advisor.session.gate import with_reference
    from advisor.session.policies import EarlyVerification
    from advisor.session.verification import pin_early_fix, pinned_ahead

    config = load_config(write_config(tmp_path, merged(TINY, {"search": {"recipes": ["amp"], "trials": 4, "precision": 0.1}})))
    facts = plan_session(config, Evidence.from_dict(json.loads((FIXTURES / "evidence" / "compute_bound.json").read_text())))
    fix = {**facts.baseline, "amp.dtype": "bfloat16"}
    draws, measured = iter([170.0, 130.0, 150.0, 140.0] * 10), []

    def measure(plan, **options):
        measured.append(plan == fix)
        return dataclasses.replace(run(next(draws) if plan == fix else 100.0), plan=plan)

    lines: list[str] = []
    session = Session(config, facts, [], measure, measure, lines.append, started=time.time(), round_measure=measure,
                      round_reference=measure, study=optuna.create_study(direction="maximize"))
    verified = Verified(time.time(), lines.append)
    base = TrialResult(0, facts.baseline, dataclasses.replace(run(100.0), plan=facts.baseline), True)
    fast = TrialResult(1, fix, dataclasses.replace(run(150.0), plan=fix), True)
    EarlyVerification(session, verified).after_trial(None, [base, fast])
    [early] = verified.recommendations
    assert early.verified and not early.pinned and measured.count(True) == early.rounds < 12, lines
    assert any(line.startswith("first verified fix") for line in lines) and 1 in verified.to_pin
    assert pinned_ahead(verified) is None, "its loose number stops no later candidate's rounds"
    measured.clear()
    pin_early_fix(with_reference(session, [base, fast]), [base, fast], verified)
    [pinned] = verified.recommendations
    assert pinned.verified and pinned.pinned and pinned.rounds > 3, lines
    assert measured.count(True) == measured.count(False) == pinned.rounds - early.rounds, "the rounds after, no ideal"
    assert len(verified.baseline_runs) == pinned.rounds and not verified.to_pin
    assert any(line == "#1, verified during the search, leads: its rounds go on to pin its number" for line in lines)


def test_an_early_verification_runs_no_ideal_and_reads_its_gap_against_the_diagnosis(tmp_path):
    """A verification during the search is the user's first verified fix: its rounds run the
    baseline and the fix alone, where an input-bound session's final verification also runs the
    ideal in its first rounds (0.6 s a round on the quickstart). Its gap to the ideal is read
    against the ideal the diagnosis measured, and the report says so."""
    import json
    import time

    from conftest import FIXTURES, merged

    from advisor.diagnosis import diagnose
    from advisor.evidence import Evidence
    from advisor.report import detail_lines
    from advisor.session import Session, plan_session
    from advisor.session.gate import with_reference
    from advisor.session.policies import EarlyVerification

    config = load_config(write_config(tmp_path, merged(TINY, {"search": {"recipes": ["dataloader"], "trials": 4}})))
    evidence = Evidence.from_dict(json.loads((FIXTURES / "evidence" / "quickstart.json").read_text()))
    diagnoses = diagnose(evidence)
    facts = plan_session(config, evidence, diagnoses)
    fix = {**facts.baseline, "dataloader.num_workers": 2}

    def measure(plan, **options):
        return dataclasses.replace(run(300.0 if plan == fix else 100.0), plan=plan)

    lines = []
    session = Session(config, facts, diagnoses, measure, measure, lines.append, started=time.time(), round_measure=measure,
                      round_reference=measure)
    base = TrialResult(0, facts.baseline, dataclasses.replace(run(100.0), plan=facts.baseline), True)
    fast = TrialResult(1, fix, dataclasses.replace(run(290.0), plan=fix), True)
    assert with_reference(session, [base, fast]).reference.with_ideal, "input-bound: the final verification runs the ideal"
    verified = Verified(time.time(), lines.append)
    EarlyVerification(session, verified).after_trial(None, [base, fast])
    [found] = verified.recommendations
    rounds = [line for line in lines if line.startswith("  round ")]
    assert rounds and not any("ideal" in line for line in rounds), lines
    ideal = evidence.derived["ideal_samples_per_s"] / evidence.full.samples_per_s
    assert found.verified and found.ideal_source == "diagnosis" and math.isclose(found.ideal_speedup, ideal)
    assert math.isclose(found.gap_recovered, (found.speedup - 1) / (ideal - 1))
    said = detail_lines(found.to_dict(), {"baseline": {}, "unit": "samples/s"})
    assert any(f"of the gap to the ideal throughput (found by the diagnosis, {ideal:.2f}x)" in line for line in said), said


def test_a_verification_whose_verdict_is_unlikely_to_settle_stops_at_search_pairs(tmp_path):
    """At the end of the search, a candidate's rounds straddle the bar (1.08x, per-round sd about
    0.12): by 12 rounds it would settle with under FUTILE_UNDER chance, so the rounds stop at
    `search.pairs` (5), say so, and the recommendation carries that chance; a candidate far over
    the bar is untouched, and one whose rounds could still settle grows to the next look."""
    import json
    import time

    from conftest import FIXTURES, merged

    from advisor.evidence import Evidence
    from advisor.session import Session, plan_session
    from advisor.session.verification import verify_each

    config = load_config(write_config(tmp_path, merged(TINY, {"search": {"recipes": ["amp"], "trials": 4, "precision": 0}})))
    facts = plan_session(config, Evidence.from_dict(json.loads((FIXTURES / "evidence" / "compute_bound.json").read_text())))

    def verified_after(rates: list[float]) -> tuple[Recommendation, list[str], int]:
        swings, measured = iter(rates * 3), []

        def measure(plan, **options):
            measured.append(plan.get("amp.dtype"))
            return dataclasses.replace(run(next(swings) if plan.get("amp.dtype") else 100.0), plan=plan)

        lines: list[str] = []
        session = Session(config, facts, [], measure, measure, lines.append, started=time.time(), round_measure=measure,
                          round_reference=measure)
        candidate = TrialResult(1, {**facts.baseline, "amp.dtype": "bfloat16"}, run(120.0), True)
        recommendations, _, _ = verify_each(session, [candidate])
        return recommendations[0], lines, measured.count("bfloat16")

    unlikely, lines, rounds = verified_after([125.0, 95.0, 120.0, 97.0, 105.0])
    assert rounds == config.search.pairs and not unlikely.verified, lines
    assert unlikely.settle_chance is not None and unlikely.settle_chance < 0.1, unlikely
    assert any(line.startswith("  the rounds stop: 12 rounds (search.max_pairs) would hardly decide a verdict straddling")
               for line in lines), lines
    wide, lines, rounds = verified_after([160.0, 85.0, 150.0, 90.0, 140.0])  # 1.2x, swinging: it could settle
    assert rounds > config.search.pairs and wide.settle_chance is None, lines
    clear, _, rounds = verified_after([150.0, 148.0, 152.0])
    assert clear.verified and rounds == 3 and clear.settle_chance is None


def test_the_chance_to_settle_falls_as_the_rounds_pin_a_mean_near_the_bar():
    from advisor.verdict import chance_to_settle, look_confidence

    level = look_confidence(4)
    near = [1.25, 0.95, 1.2, 0.97, 1.05]
    assert chance_to_settle(near, 1.05, 12, level) < 0.1
    assert chance_to_settle(near + near[:3], 1.05, 12, level) < chance_to_settle(near, 1.05, 12, level)
    assert chance_to_settle([1.6, 0.9, 1.5, 0.95, 1.4], 1.05, 12, level) > 0.2, "far from the bar, a wide interval may settle"
    assert chance_to_settle([1.5, 1.52, 1.49], 1.05, 12, level) == 1.0, "settled already"
    assert chance_to_settle([1.1], 1.05, 12, level) == 1.0, "one round tells nothing"


def _verification(tmp_path, rates: dict[str, list[float]], ahead=None, **search):
    """verify_each over candidates whose runs read `rates` in turn (the baseline 100/s), on the
    compute_bound evidence (`ahead`: a fix verified before): the recommendations, the progress
    lines, each candidate's runs."""
    import json
    import time

    from conftest import FIXTURES, merged

    from advisor.evidence import Evidence
    from advisor.session import Session, plan_session
    from advisor.session.verification import verify_each

    config = load_config(write_config(tmp_path, merged(TINY, {"search": {"recipes": ["amp", "threads"], "trials": 4, **search}})))
    facts = plan_session(config, Evidence.from_dict(json.loads((FIXTURES / "evidence" / "compute_bound.json").read_text())))
    plans = {name: {**facts.baseline, "threads.intra_op": 6 + index} for index, name in enumerate(rates, start=1)}  # not the baseline's
    draws = {name: iter(values * 4) for name, values in rates.items()}
    measured = {name: 0 for name in rates}

    def measure(plan, **options):
        name = next((name for name, candidate in plans.items() if candidate == plan), None)
        if name is None:
            return dataclasses.replace(run(100.0), plan=plan)
        measured[name] += 1
        return dataclasses.replace(run(next(draws[name])), plan=plan)

    lines: list[str] = []
    session = Session(config, facts, [], measure, measure, lines.append, started=time.time(), round_measure=measure,
                      round_reference=measure)
    candidates = [TrialResult(index, plan, run(120.0), True) for index, plan in enumerate(plans.values(), start=1)]
    recommendations, _, _ = verify_each(session, candidates, ahead=ahead)
    return {r.trial: r for r in recommendations}, lines, list(measured.values())


def test_a_candidate_unlikely_to_settle_ends_while_one_that_may_settle_goes_on(tmp_path):
    """Two candidates straddle the bar after 5 rounds: #1 near it (1.08x, tight), #2 far over it
    but swinging. #1 could hardly settle by 12 rounds, so it runs no more; #2 goes on alone, and
    #1's verdict stands on its own 5 rounds at the level the rest report, with its chance said."""
    found, lines, runs = _verification(tmp_path, {"near": [125.0, 95.0, 120.0, 97.0, 105.0],
                                                  "swinging": [160.0, 85.0, 150.0, 90.0, 140.0]}, precision=0)
    assert runs[0] == 5 and runs[1] > 5, (runs, lines)
    assert any(line.startswith("  no more rounds for #1 (about ") and "the others go on" in line for line in lines), lines
    near, swinging = found[1], found[2]
    assert near.rounds == 5 and near.settle_chance is not None and near.settle_chance < 0.1 and not near.verified
    assert swinging.rounds == runs[1] and swinging.settle_chance is None
    assert near.confidence == swinging.confidence, "one level for every verdict of the verification"


def test_a_candidate_settled_under_the_bar_ends_while_the_verified_one_is_pinned(tmp_path):
    """#1 settles under the bar at the first look (0.8x, steady); #2 is verified there (1.5x, noisy
    enough that pinning its number to +-10% asks more rounds): #2's pinning rounds run without #1."""
    found, lines, runs = _verification(tmp_path, {"slower": [80.0, 81.0, 79.0], "faster": [170.0, 130.0, 150.0, 140.0]})
    assert runs[0] == 3 and runs[1] > 3, (runs, lines)
    assert any("no more rounds for #1 (settled under the bar)" in line for line in lines), lines
    assert not found[1].verified and found[1].rounds == 3 and found[2].verified and found[2].rounds == runs[1]


def test_a_verified_candidate_that_cannot_lead_ends_while_the_fastest_is_pinned(tmp_path):
    """Three verified at the second look: #2 fastest (1.5x, noisy: its number asks more rounds),
    #1 steady at 1.3x, its interval ending more than search.precision under #2's speedup, #3 at
    1.45x, reaching about #2's (tied: it may still lead). #1 leaves the rounds, said; #3 runs on
    beside #2, and its interval reaches #2's number at the end."""
    found, lines, runs = _verification(tmp_path, {"outrun": [130.0, 131.0, 129.0],
                                                  "faster": [170.0, 130.0, 150.0, 140.0],
                                                  "tied": [145.0, 140.0, 150.0, 142.0]}, precision=0.1)
    assert runs[0] == 5 and runs[1] > 5 and runs[2] == runs[1], (runs, lines)
    assert any(line.startswith("  no more rounds for #1 (1.30x, 1.29-1.32x): verified, and more than search.precision "
                               "under the 1.51x of #2, whose number the rounds go on to pin") for line in lines), lines
    assert found[1].verified and found[1].rounds == 5 and not found[1].pinned
    assert found[2].verified and found[2].pinned and found[3].verified and found[3].interval[1] >= found[2].speedup


def test_a_fix_verified_under_one_pinned_before_stops_at_its_verdict(tmp_path):
    """A candidate verified at a look (1.5x, noisy enough that pinning it to +-10% asks more
    rounds) has its number pinned; but where a fix verified and pinned before is faster
    (2.0x) and no heavier, the user adopts that one: the candidate's rounds stop at its verdict,
    said, and it is not marked pinned. A leaner one (ranked first when tied) is still pinned."""
    from advisor.session.verification import pinned_ahead

    noisy, pin = {"faster": [170.0, 130.0, 150.0, 140.0]}, {"precision": 0.1}
    alone, _, runs = _verification(tmp_path, noisy, **pin)
    assert runs[0] > 5 and alone[1].verified and alone[1].pinned, runs
    ahead = dataclasses.replace(verified_at(7, 200.0).recommendations[0], pinned=True)
    behind, lines, runs = _verification(tmp_path, noisy, ahead=ahead, **pin)
    assert runs[0] == 5 and behind[1].verified and not behind[1].pinned, (runs, lines)
    assert any(line.startswith("  #1 is verified at 1.") and "under the 2.00x of trial #7, verified before" in line
               for line in lines), lines
    from advisor.report import detail_lines

    first, second = dataclasses.replace(ahead, rank=1).to_dict(), dataclasses.replace(behind[1], rank=2).to_dict()
    said = detail_lines(second, {"baseline": {}, "recommendations": [first, second]})
    assert "     its rounds stopped at its verdict, after 5: the faster #1 is the number to adopt, pinned to " \
           "search.precision" in said, said
    assert not any("stopped at its verdict" in line for line in detail_lines(first, {"baseline": {}, "recommendations": [first, second]}))
    # ranked first though slower (a leaner tie): the faster one, ranked behind, is not called the one to adopt
    leaner, faster = dict(second, rank=1), dict(first, rank=2)
    said = detail_lines(leaner, {"baseline": {}, "recommendations": [leaner, faster]})
    assert "     its rounds stopped at its verdict, after 5, while those of the faster #2 went on to pin its number " \
           "to search.precision: its own interval is the wider for it" in said, said
    assert not any("number to adopt" in line for line in said), said
    slower = dataclasses.replace(ahead, speedup=1.2)
    assert _verification(tmp_path, noisy, ahead=slower, **pin)[2][0] > 5, "a faster candidate's number is pinned"
    heavier = dataclasses.replace(ahead, peak_memory_mb=1000.0)
    assert _verification(tmp_path, noisy, ahead=heavier, **pin)[2][0] > 5, "a much leaner one may lead: pinned"
    ledger = verified_at(7, 200.0)
    assert pinned_ahead(ledger) is None, "a fix whose rounds did not pin it leaves a later one's to pin"
    ledger.recommendations[0] = ahead
    assert pinned_ahead(ledger) is ahead


def test_the_shares_of_an_unverified_winner_are_not_measured():
    """#1 combines two recipes but showed no gain: its shares, ratios as noisy as its own, would
    tell nothing, so no leave-one-out round runs (and it says so); a verified #1's do."""
    from advisor.session.ranking import _with_shares

    calls, lines = [], []

    def measure(plan):
        calls.append(plan)
        return dataclasses.replace(run(100.0), plan=plan)

    plan = {"amp": 1, "threads": 1}
    unverified = dataclasses.replace(recommended(4, plan, 1.12, amp=(1.0, 0.9, 1.1), threads=(1.0, 0.9, 1.1)),
                                     verified=False, contributions={})
    assert _with_shares([unverified], {"amp": 0, "threads": 0}, measure, 5, lines.append) == ([unverified], {})
    assert calls == [] and lines == ["#1 (amp+threads) is not verified: its recipes' shares are not measured"]
    ranked, left_out = _with_shares([dataclasses.replace(unverified, verified=True)], {"amp": 0, "threads": 0}, measure, 5,
                                    lines.append)
    assert calls and set(left_out) == {"amp", "threads"} and set(ranked[0].contributions) == {"amp", "threads"}


def test_the_shares_rounds_stop_at_the_first_look_where_none_astride_1x_would_likely_be_shown():
    """On a job whose runs swing +-30%, each share of a verified #1 reads near 1x after 3 rounds,
    its interval wide: the 2 rounds left would hardly clear one of 1x, so the shares' rounds stop
    there and say so; a share already clear of 1x (amp's, 2x) does not hold them. A steady
    share of 1.02-1.05x a round, astride 1x after 3 rounds, likely is clear of it after 5: the
    rounds go on, and show it."""
    from advisor.session.ranking import _with_shares

    rates = {"amp=0": [50.0, 52.0, 49.0, 51.0, 50.0], "threads=0": [130.0, 75.0, 110.0, 70.0, 125.0]}
    calls, lines = [], []

    def measure(plan):
        calls.append(plan)
        name = "amp=0" if plan["amp.dtype"] is None else "threads=0" if plan["threads.intra_op"] == 2 else ""
        rate = rates[name][sum(1 for p in calls if p == plan) - 1] if name else 100.0
        return dataclasses.replace(run(rate), plan=plan)

    plan, baseline = {"amp.dtype": "bfloat16", "threads.intra_op": 1}, {"amp.dtype": None, "threads.intra_op": 2}
    top = dataclasses.replace(recommended(4, plan, 2.1, amp=(1.0, 0.9, 1.1), threads=(1.0, 0.9, 1.1)), contributions={})
    ranked, _ = _with_shares([top], baseline, measure, 5, lines.append)
    assert len(calls) == 9, len(calls)
    assert any(line.startswith("  the shares' rounds stop: 5 rounds would hardly show any (threads: ") for line in lines), lines
    amp, threads = ranked[0].contributions["amp"], ranked[0].contributions["threads"]
    assert amp["shown"] and not threads["shown"] and threads["interval"][0] < 1.0 < threads["interval"][1]
    calls.clear()
    rates = {"amp=0": [50.0] * 5, "threads=0": [96.0, 98.5, 95.0, 97.0, 96.0]}  # threads adds 1.02-1.05x a round
    ranked, _ = _with_shares([top], baseline, measure, 5, lines.append)
    assert len(calls) == 15 and ranked[0].contributions["threads"]["shown"], len(calls)


def test_once_a_verdict_is_left_straddling_only_one_that_could_clear_the_bar_gets_more_rounds(tmp_path):
    """After 5 rounds #1 straddles the bar near it (hardly decided by 12 rounds) and #2 (0.97x)
    would likely settle under it by 12: but with #1 left straddling the session cannot say that
    no fix reaches the bar, and #2 could hardly clear it, so neither gets more rounds."""
    found, lines, runs = _verification(tmp_path, {"near": [125.0, 95.0, 120.0, 97.0, 105.0],
                                                  "under": [100.0, 92.0, 105.0, 90.0, 98.0]}, precision=0)
    assert runs == [5, 5], (runs, lines)
    assert any(line.startswith("  the rounds stop: 12 rounds (search.max_pairs) would hardly decide") for line in lines), lines
    assert all(r.settle_chance is not None and r.settle_chance < 0.1 and not r.verified for r in found.values())


def test_a_plans_epoch_end_is_timed_in_its_first_quiet_runs_and_charged_their_mean_after():
    """EpochEnds: a verification times each plan's epoch end in its first EPOCH_RUNS quiet runs,
    then hands the plan's later runs their mean (charged, not timed again); a run on a busy machine,
    or one that was itself charged, times nothing; plans are told apart."""
    from advisor.session.verification import EPOCH_RUNS, EpochEnds

    asked: list = []
    timings = iter([0.2, 0.9, 0.3, 0.4])  # the second on a busy machine

    def measure(plan, epoch_end_s=None):
        asked.append((plan["dataloader.num_workers"], epoch_end_s))
        if epoch_end_s is not None:
            return dataclasses.replace(run(100.0), epoch={"end_s": epoch_end_s, "charged_s": 0.1, "timed": False})
        busy = len(asked) == 2
        return dataclasses.replace(run(100.0), other_cpu_share=0.5 if busy else 0.0,
                                   epoch={"end_s": next(timings), "charged_s": 0.1, "timed": True})

    epochs = EpochEnds()
    measured = epochs.measuring(measure)
    two, three = {**BASELINE, "dataloader.num_workers": 2}, {**BASELINE, "dataloader.num_workers": 3}
    for _ in range(4):
        measured(two)
    assert EPOCH_RUNS == 2 and [known for _, known in asked] == [None, None, None, pytest.approx(0.25)], asked
    assert epochs.known(three) is None
    measured(three)
    assert asked[-1] == (3, None) and epochs.known(two) == pytest.approx(0.25)
    nothing = EpochEnds()
    nothing.measuring(lambda plan: run(100.0))(two)  # a run without workers: no epoch, never told one
    assert nothing.known(two) is None and nothing.timed == {}


def test_a_fix_that_combines_recipes_runs_without_each_while_its_number_is_pinned_and_its_shares_go_on_from_there(tmp_path):
    """A verification of one candidate that combines recipes runs it without each of them too,
    once its verdict settles, in the rounds that pin its number (rounds whose imports are paid
    anyway; the user's first verified fix is not held up), until the leave-one-out's own rule
    says they are enough; #1's shares are read from them, and run no round of their own where
    they settle there. Where the settled look pins the number,
    none run; among several candidates, only the one whose number is pinned runs them."""
    import json
    import time

    from conftest import FIXTURES, merged

    from advisor.evidence import Evidence
    from advisor.session import Session, plan_session
    from advisor.session.ranking import _with_shares
    from advisor.session.verification import verify_each

    config = load_config(write_config(tmp_path, merged(TINY, {"search": {"recipes": ["amp", "threads"], "trials": 4, "precision": 0.1}})))
    facts = plan_session(config, Evidence.from_dict(json.loads((FIXTURES / "evidence" / "compute_bound.json").read_text())))
    baseline = facts.baseline
    fix = {**baseline, "amp.dtype": "bfloat16", "threads.intra_op": 7}
    names = {plan_key(fix): "fix", plan_key({**fix, "amp.dtype": baseline["amp.dtype"]}): "without amp",
             plan_key({**fix, "threads.intra_op": baseline["threads.intra_op"]}): "without threads"}
    calls: list[str] = []

    def measuring(swing: float):
        rates = {"fix": 200.0, "without amp": 110.0, "without threads": 180.0}

        def measure(plan, **options):
            name = names.get(plan_key(plan), "baseline")
            calls.append(name)
            step = calls.count(name) % 3 - 1  # -1, 0, 1 in turn
            jitter = 1 + (swing if name in ("fix", "without amp", "without threads") else 0.01) * step
            return dataclasses.replace(run(rates.get(name, 100.0) * jitter), plan=plan)
        return measure

    lines: list[str] = []
    measure = measuring(0.12)  # the fix swings +-12%: its first look does not pin its number
    session = Session(config, facts, [], measure, measure, lines.append, started=time.time(), round_measure=measure,
                      round_reference=measure)
    verified = Verified(started=time.time())
    found, _, _ = verify_each(session, [TrialResult(1, fix, run(200.0), True)], verified)
    rounds, first_look = calls.count("baseline"), 3
    beside = first_look  # both shares clear of 1x at the leave-one-out's first look: their arms stop there
    assert found[0].verified and rounds > first_look + beside, lines
    assert calls.count("without amp") == calls.count("without threads") == beside, calls
    said = [line for line in lines if line.startswith("  round ")]
    assert all("without" not in line for line in said[:first_look]) and "#1 without amp " in said[first_look], said
    assert all("without" not in line for line in said[first_look + beside:]), "the rounds that go on pinning run without them"
    assert len(verified.beside[1].baseline) == beside and set(verified.beside[1].candidates) == {"without amp", "without threads"}

    calls.clear()
    top = dataclasses.replace(found[0], rank=1)
    ranked, left_out = _with_shares([top], baseline, measure, config.search.pairs, lines.append, verified.beside)
    amp, threads = ranked[0].contributions["amp"], ranked[0].contributions["threads"]
    assert amp["shown"] and threads["shown"] and set(left_out) == {"amp", "threads"}
    assert calls == [] and f"  {beside} round(s) run beside its verification: no more are needed" in lines, lines
    assert amp["factor"] == pytest.approx(200 / 110) and threads["factor"] == pytest.approx(200 / 180)

    steady = measuring(0.01)
    session = dataclasses.replace(session, round_measure=steady, round_reference=steady, measure=steady)
    calls.clear()
    pinned_at_once = Verified(started=time.time())
    verify_each(session, [TrialResult(1, fix, run(200.0), True)], pinned_at_once)
    assert calls.count("baseline") == first_look and "without amp" not in calls and pinned_at_once.beside == {}, calls
    swinging = dataclasses.replace(session, round_measure=measure, round_reference=measure, measure=measure)
    lines.clear()
    several = Verified(started=time.time())
    verify_each(swinging, [TrialResult(1, fix, run(200.0), True), TrialResult(2, {**fix, "threads.intra_op": 5}, run(190.0), True)],
                several)
    said = [line for line in lines if line.startswith("  round ")]
    assert any("#1 without amp" in line for line in said) and not any("#2 without" in line for line in said), said
    assert set(several.beside) == {1}, "the pinned candidate's only: #2 (no faster than the baseline) is no #1"
