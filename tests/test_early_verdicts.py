"""A search that has advice early: a trial far over the bar is verified at once, the search
stops once a verified fix is not beaten for a while, and the end verifies only what could beat
it. The pieces are pure functions of trials and verdicts, tested here on made-up numbers."""

from advisor.config import load_config
from advisor.measure import Measurement
from advisor.search import TrialResult
from advisor.session import (
    Recommendation, Verified, confirm_beside_fix, early_candidate, plateau, stacked_winners, still_to_verify,
)
from conftest import TINY, write_config

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
    assert [t.number for t in left] == [3, 5] and passed_over == [], "the early check verified nothing: the next two, three in all"
    assert [t.number for t in still_to_verify(candidates, trials, Verified(0.0), 3, BASELINE)[0]] == [3, 5, 2]
    assert still_to_verify(candidates, trials, Verified(0.0), 0, BASELINE) == ([], []), "verify_top 0: trials only"


SERVICE = {"amp.dtype": None, "inference_mode.enabled": False, "threads.inter_op": 2, "compile.mode": None}
SINGLES = {"amp": {**SERVICE, "amp.dtype": "bfloat16"}, "inference_mode": {**SERVICE, "inference_mode.enabled": True},
           "threads": {**SERVICE, "threads.inter_op": 1}, "compile": {**SERVICE, "compile.mode": "default"}}


def measured(number: int, params: dict, rate: float, feasible: bool = True) -> TrialResult:
    return TrialResult(number, {**SERVICE, **params}, run(rate), feasible)


def test_the_recipes_that_helped_alone_are_tried_together():
    trials = [measured(0, {}, 100.0), measured(1, SINGLES["amp"], 130.0), measured(2, SINGLES["inference_mode"], 150.0),
              measured(3, SINGLES["threads"], 103.0)]
    assert stacked_winners(trials, SINGLES, SERVICE, 1.05) is None, "compile has no trial yet"
    trials.append(measured(4, SINGLES["compile"], 400.0, feasible=False))
    assert stacked_winners(trials, SINGLES, SERVICE, 1.05) == {**SERVICE, "amp.dtype": "bfloat16", "inference_mode.enabled": True}, \
        "threads (1.03x) did not clear 1.05x; compile's trial was infeasible"
    assert stacked_winners(trials, SINGLES, SERVICE, 1.4) is None, "only inference_mode clears 1.4x: nothing to stack"
    assert stacked_winners(trials[1:], SINGLES, SERVICE, 1.05) is None, "no baseline trial: nothing to judge against"
    shared = {**SINGLES, "threads": {**SERVICE, "threads.inter_op": 1, "amp.dtype": "float16"}}
    trials[3] = measured(3, shared["threads"], 140.0)
    assert stacked_winners(trials, shared, SERVICE, 1.05)["amp.dtype"] == "float16", "the faster trial's setting holds"


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
    assert "1 of 3 trials pruned midway, clearly losing (trial #1)" in render_recommendations(payload)
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


def test_leaving_a_recipe_out_restores_only_the_keys_the_baseline_has():
    """The threads recipe also has a service's inter-op key, which a training baseline lacks:
    leaving threads out of a training winner must not look it up (it crashed the session)."""
    from advisor.session import without_recipe

    baseline = {"dataloader.num_workers": 0, "threads.intra_op": None}
    winner = {"dataloader.num_workers": 2, "threads.intra_op": 1}
    assert without_recipe(winner, baseline, "threads") == {"dataloader.num_workers": 2, "threads.intra_op": None}
    assert without_recipe(winner, baseline, "dataloader")["dataloader.num_workers"] == 0


def test_a_plateau_first_measures_the_best_plans_neighbours():
    """The best plan's one-step moves, each knob to the next value, and only those not measured
    or queued (in effect: prefetch does nothing without workers)."""
    import optuna

    from advisor import search
    from advisor.session import effective
    from recipes import Choice, IntRange

    space = {"dataloader.num_workers": IntRange(0, 8), "dataloader.prefetch_factor": Choice((2, 4, 8)),
             "dataloader.persistent_workers": Choice((False, True))}
    best = {"dataloader.num_workers": 8, "dataloader.prefetch_factor": 2, "dataloader.persistent_workers": True}
    steps = search.neighbours(best, space)
    assert [s for s in steps if s != best] == steps and len(steps) == 4, steps  # 7 workers; prefetch 4, 8; not persistent
    assert {"dataloader.num_workers": 8, "dataloader.prefetch_factor": 4, "dataloader.persistent_workers": True} in steps
    assert search.neighbours({"b": 64}, {"b": IntRange(16, 64, log=True)}) == [{"b": 32}], "a log range moves by 2x"

    study = optuna.create_study(direction="maximize")
    study.enqueue_trial({**best, "dataloader.num_workers": 7})
    first = search.unmeasured_neighbour(study, space, BASELINE, best, effective)
    assert first == {**best, "dataloader.prefetch_factor": 4}, "7 workers is queued already"
    idle = {"dataloader.num_workers": 0, "dataloader.prefetch_factor": 2, "dataloader.persistent_workers": False}
    study.enqueue_trial({**idle, "dataloader.num_workers": 1})
    assert search.unmeasured_neighbour(study, space, BASELINE, idle, effective) is None, \
        "without workers prefetch and persistence do nothing: no new plan one step away"


def test_the_neighbours_measured_are_those_of_the_best_at_the_plateau():
    from advisor.session import neighbourhood_of

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
    from advisor.session import plateau

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
    from advisor.session import baseline_trial_is_diagnosed, with_first_run

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
