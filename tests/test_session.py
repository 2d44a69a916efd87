"""The session's pure decisions: which recipes, in which order, and how fixes are ranked."""

import dataclasses

import pytest

from advisor.errors import UserError
from advisor.plan import active_recipes, changes_of
from advisor.recipes import Context
from advisor.recipes.fetch_threads import PREP_BOUND_WHY
from advisor.session import Recommendation, SessionFacts
from advisor.session.planning import select_recipes, textbook_params
from advisor.session.ranking import rank

MEMORY_FIRST = Context("cpu", 2, 2, 97, True, bottlenecks=("memory", "input-prep"))
BASELINE = {"dataloader.num_workers": 0, "dataloader.prefetch_factor": 2, "dataloader.persistent_workers": False,
            "dataloader.pin_memory": False, "threads.intra_op": 2, "amp.dtype": None, "compile.mode": None,
            "checkpointing.share": 0.0, "batch_size": 32}


def test_auto_selects_what_targets_the_diagnosis_and_says_why_not():
    chosen, skipped = select_recipes("auto", MEMORY_FIRST)
    assert [r.name for r in chosen] == ["dataloader", "threads", "amp", "checkpointing", "grad_accumulation"]
    untargeted = ("allocator", "compile", "tf32", "cudnn_benchmark", "fused_optimizer", "channels_last")
    assert skipped == {**{name: "targets no diagnosed bottleneck" for name in untargeted},
                       "fetch_threads": PREP_BOUND_WHY}, "a prep-bound job's samples compute: threads would queue on the GIL"
    no_blocks = dataclasses.replace(MEMORY_FIRST, blocks=0)
    assert "blocks" in select_recipes("auto", no_blocks)[1]["checkpointing"]


def test_listed_recipes_and_unknown_names():
    chosen, _ = select_recipes(["compile"], MEMORY_FIRST)
    assert [r.name for r in chosen] == ["compile"]
    with pytest.raises(UserError, match="did you mean 'compile'"):
        select_recipes(["compil"], MEMORY_FIRST)


def test_textbook_plans_fix_the_worst_bottleneck_first():
    space_keys = ["dataloader.num_workers", "dataloader.prefetch_factor", "dataloader.persistent_workers",
                  "amp.dtype", "checkpointing.share", "threads.intra_op"]
    facts = SessionFacts(None, MEMORY_FIRST, ("dataloader", "threads", "amp", "checkpointing"), {}, BASELINE,
                         {key: None for key in space_keys})
    changed = [{k: v for k, v in plan.items() if v != BASELINE[k]} for plan in textbook_params(facts)]
    assert changed == [{"amp.dtype": "bfloat16"}, {"checkpointing.share": 1.0},
                       {"dataloader.num_workers": 2, "dataloader.persistent_workers": True}]


def test_prefetch_without_workers_changes_nothing():
    plan = {**BASELINE, "dataloader.prefetch_factor": 8}
    assert active_recipes(plan, BASELINE) == () and changes_of(plan, BASELINE) == {}
    plan = {**plan, "dataloader.num_workers": 2}
    assert [r.name for r in active_recipes(plan, BASELINE)] == ["dataloader"]


def recommendation(speedup, interval, peak, verified=True):
    return Recommendation(0, ("dataloader",), {}, {}, speedup, interval, verified, "", {}, peak, "", 0, 0.0)


def test_rank_prefers_a_much_leaner_fix_it_cannot_tell_apart():
    fast = recommendation(3.0, (2.8, 3.3), 2000)
    lean = recommendation(2.9, (2.7, 3.1), 800)
    assert rank([fast, lean]) == [lean, fast]


def test_rank_keeps_speed_order_for_small_memory_differences_or_clear_gaps():
    fast = recommendation(3.0, (2.8, 3.3), 1000)
    close = recommendation(2.9, (2.7, 3.1), 950)
    slower = recommendation(2.0, (1.9, 2.1), 300)
    unverified = recommendation(5.0, (0.9, 9.0), 100, verified=False)
    assert rank([slower, unverified, close, fast]) == [fast, close, slower, unverified]
    wide_and_lean = recommendation(1.02, (0.75, 1.38), 369, verified=False)  # ended after 5 rounds
    narrow = recommendation(1.12, (1.02, 1.24), 466, verified=False)
    assert rank([wide_and_lean, narrow]) == [narrow, wide_and_lean], "nothing verified: the faster leads, not the leaner"


def test_rank_puts_the_lowest_p95_first_among_fixes_that_keep_up_with_a_saturated_baseline():
    """Where the speedups are of requests answered a second at full load (the baseline
    saturates), a speedup says how much more a fix could take, while the objective asks for the
    lowest p95 at the load offered: of the fixes that keep up, the one with the lowest p95
    leads; one that fell behind in a run comes after them, whatever its speedup; judged on the
    objective, the faster leads."""
    import dataclasses

    def served(speedup, interval, p95_ms, saturated=False):
        return dataclasses.replace(recommendation(speedup, interval, 500), speedup_basis="answered",
                                   latency_ms={"p95_ms": p95_ms, **({"saturated": True} if saturated else {})})

    batching = served(1.25, (1.13, 1.39), 15.6)
    instances = served(1.54, (1.41, 1.68), 18.2)  # more headroom, a slower answer
    assert rank([instances, batching]) == [batching, instances]
    behind = served(2.2, (2.1, 2.3), 400.0, saturated=True)
    assert rank([behind, instances, batching]) == [batching, behind, instances]
    plain = [dataclasses.replace(r, speedup_basis="objective") for r in (instances, batching)]
    assert rank(plain) == plain, "judged on the objective, the faster leads"


def test_a_large_share_is_tried_whatever_its_band_and_a_skipped_fix_says_what_it_could_reach():
    from test_diagnose import stored

    from advisor.diagnosis import diagnose
    from advisor.findings import Diagnosis
    from advisor.session.planning import to_fix

    found = diagnose(stored("memory_budget"))  # compute at 60% of the step, beside an input stall: no longer "low"
    assert [(d.bottleneck, d.severity) for d in found][:2] == [("memory", "high"), ("compute", "moderate")]
    low = [Diagnosis("input-prep", "high", 0.4, "", (), ()), Diagnosis("network", "low", 0.6, "", (), ())]
    assert to_fix(low) == ("input-prep", "network")
    small = diagnose(stored("fetch_stall"))  # compute "low" at 16%: the input's fixes come first
    assert to_fix(small) == ("input-fetch",)
    context = dataclasses.replace(MEMORY_FIRST, bottlenecks=("input-fetch",), reach=(("input-fetch", 0.83), ("compute", 0.16)))
    chosen, skipped = select_recipes("auto", context)
    assert [r.name for r in chosen] == ["dataloader", "fetch_threads"]
    assert skipped["amp"].startswith("could reach 16% of the step (compute")
    assert skipped["checkpointing"] == "targets no diagnosed bottleneck"
    named = dataclasses.replace(context, named=("allocator",))
    assert "allocator" in [r.name for r in select_recipes("auto", named)[0]]


def test_the_first_trials_go_where_the_largest_share_of_the_step_is():
    context = dataclasses.replace(MEMORY_FIRST, bottlenecks=("input-prep", "compute"),
                                  reach=(("compute", 0.7), ("input-prep", 0.3)))
    space_keys = ["dataloader.num_workers", "dataloader.prefetch_factor", "dataloader.persistent_workers",
                  "amp.dtype", "threads.intra_op"]
    facts = SessionFacts(None, context, ("dataloader", "amp"), {}, BASELINE, {key: None for key in space_keys})
    changed = [{k: v for k, v in plan.items() if v != BASELINE[k]} for plan in textbook_params(facts)]
    assert changed[0] == {"amp.dtype": "bfloat16"}
