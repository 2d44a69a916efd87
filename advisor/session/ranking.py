"""Ranking: verified fixes first, fastest first (a much leaner one leads a fix it cannot be told
apart from); #1's recipes each given their share by leaving it out; and when #1 runs clearly
faster without one of them, that plan verified and put first."""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional

from advisor import search
from advisor.failures import out_of_memory
from advisor.harness import kept
from advisor.measure import Measurement
from advisor.plan import without_recipe
from advisor.session.bundle import Session
from advisor.session.margins import MEMORY_TIE_SAVING
from advisor.session.results import Progress, Recommendation
from advisor.session.shares import factors_of, share_looks, shares_done, shares_settled
from advisor.session.verification import EpochEnds, Verified, verify_each
from advisor.verdict import paired_interval, reported_confidence
from advisor.verify import ANSWERED, Rounds, interleave


def rank_session(session: Session, verified: Verified,
                 record: Optional[Callable[[dict, Measurement], search.TrialResult]] = None) -> list[Recommendation]:
    """The session's verified and unverified fixes, ranked, #1's recipes with their shares. With
    `record` (a study to keep a run in), #1 without a recipe that slows it is verified too
    (`without_what_slows`), and leads when verified."""
    baseline, measure, pairs, progress = session.baseline, session.round_measure, session.config.search.pairs, session.progress

    def verify(candidates: list[search.TrialResult]) -> list[Recommendation]:
        recommendations, baseline_runs, rejections = verify_each(session, candidates, verified)
        verified.add(recommendations, baseline_runs, rejections)
        return recommendations

    try:  # the leave-one-out rounds' kept interpreters (`advisor.harness.kept`) end with them
        recommendations, left_out = _finish_ranking(verified.recommendations, baseline, measure, pairs, progress,
                                                    verified.beside)
        if record is None:
            return recommendations
        return without_what_slows(recommendations, left_out, verify, record, session.config.constraints.max_memory_mb,
                                  lambda ranked: _with_shares(ranked, baseline, measure, pairs, progress, verified.beside),
                                  progress)
    finally:
        kept.close_all()


def rank(recommendations: list[Recommendation]) -> list[Recommendation]:
    """Verified first, fastest first; but when a verified fix the measurements cannot tell apart
    from the fastest (its interval reaches the fastest's speedup) needs much less memory, it leads; and
    where the speedups are of requests answered a second at full load (a baseline near its limit),
    the fix with the lowest p95 of those that kept up in every run leads: the speedup says how
    much more each could take, the p95 is what the objective asks of the load offered."""
    ordered = sorted(recommendations, key=lambda r: (not r.verified, -r.speedup))
    if not ordered:
        return ordered
    best = ordered[0]
    tied = [r for r in ordered if r.verified == best.verified and r.interval[1] >= best.speedup]
    kept_up = [r for r in ordered if r.verified == best.verified and kept_up_with_arrivals(r)]
    if kept_up:  # each answers about every arrival: the lowest p95 serves them soonest
        quickest = min(kept_up, key=lambda r: r.latency_ms.get("p95_ms", math.inf))
        return [quickest] + [r for r in ordered if r is not quickest]
    leanest = min(tied, key=lambda r: r.peak_memory_mb)
    # among verified fixes only: an unverified interval reaches the fastest's for want of rounds
    # (a candidate ended early: `Stopping`), not because the two run alike
    if best.verified and leanest.peak_memory_mb < (1 - MEMORY_TIE_SAVING) * best.peak_memory_mb:
        return [leanest] + [r for r in ordered if r is not leanest]
    return ordered


def kept_up_with_arrivals(recommendation: Recommendation) -> bool:
    """Whether a fix judged on requests answered (`speedup_basis`) kept up in every verification run."""
    return recommendation.speedup_basis == ANSWERED and not recommendation.latency_ms.get("saturated")


def _renumbered(ranked: list[Recommendation]) -> list[Recommendation]:
    return [dataclasses.replace(r, rank=index) for index, r in enumerate(ranked, start=1)]


def _finish_ranking(recommendations: list[Recommendation], baseline: dict, measure, pairs: int,
                   progress: Progress, beside: Optional[dict[int, Rounds]] = None) -> tuple[list[Recommendation], dict]:
    """Ranks the recommendations, and gives #1 its recipes' shares (`_with_shares`)."""
    return _with_shares(_renumbered(rank(recommendations)), baseline, measure, pairs, progress, beside)


def _with_shares(ranked: list[Recommendation], baseline: dict, measure, pairs: int,
                progress: Progress, beside: Optional[dict[int, Rounds]] = None) -> tuple[list[Recommendation], dict]:
    """When #1 is verified, combines recipes and its shares are not measured yet, measures it
    again beside itself without each one, to give each recipe's share, going on from the rounds
    its verification ran those plans in (`beside`, by trial: `verification.shares_arms`).
    Returns the ranking and, by recipe, the plan without it with its runs ({} when nothing was measured)."""
    if not ranked or len(ranked[0].recipes) < 2 or ranked[0].contributions:
        return ranked, {}
    if not ranked[0].verified:  # each share is a ratio as noisy as #1's own, which showed no gain: rounds that tell nothing
        progress(f"#1 ({'+'.join(ranked[0].recipes)}) is not verified: its recipes' shares are not measured")
        return ranked, {}
    shares, left_out = _leave_one_out(ranked[0], baseline, measure, pairs, progress, (beside or {}).get(ranked[0].trial))
    return [dataclasses.replace(ranked[0], contributions=shares), *ranked[1:]], left_out


def slowing_recipe(top: Recommendation, max_memory_mb: Optional[float]) -> Optional[str]:
    """The recipe #1 runs clearly fastest without (its share's interval wholly under 1x), among
    those it does not need to keep within the memory budget; None when none slows it. A pure function."""
    slowing = {recipe: share["factor"] for recipe, share in top.contributions.items()
               if not share.get("needed_for_budget") and share["interval"][1] < 1.0
               and not (max_memory_mb is not None and share.get("peak_without_mb", 0.0) > max_memory_mb)}
    return min(slowing, key=slowing.get) if slowing else None


def without_what_slows(ranked: list[Recommendation], left_out: dict, verify: Callable[[list], list[Recommendation]],
                       record: Callable[[dict, Measurement], search.TrialResult], max_memory_mb: Optional[float],
                       shares: Callable[[list], tuple[list, dict]], progress: Progress) -> list[Recommendation]:
    """When #1 runs clearly faster without one of its recipes, that plan is the advice: kept as
    a trial (its first run in the leave-one-out rounds; a trial of the same plan, where the
    study has one), verified against the baseline as every candidate is, and ranked first when
    verified, since its rounds beside #1 already showed it the faster. Then its own shares are
    measured, and so on, once per recipe of the first #1 at most. `verify` gives the candidates'
    recommendations; `shares` is `_with_shares` for a ranking."""
    for _ in range(len(ranked[0].recipes) if ranked else 0):
        top = ranked[0]
        recipe = slowing_recipe(top, max_memory_mb)
        plan, runs = left_out.get(recipe, ({}, []))
        measured = next((run for run in runs if run.ok), None)
        if measured is None:
            break
        trial = record(plan, measured)
        if trial.number in {r.trial for r in ranked}:
            break
        factor, (low, high) = top.contributions[recipe]["factor"], top.contributions[recipe]["interval"]
        faster = f"{1 / factor:.2f}x faster without {recipe} ({1 / high:.2f}-{1 / low:.2f}x, beside it in the same rounds)"
        progress(f"#1 runs {faster}: verifying it without {recipe}, as trial #{trial.number}")
        found = verify([trial])
        if not found or not found[0].verified:
            return _renumbered(ranked + found)
        lead = dataclasses.replace(found[0], leads_because=f"leads: trial #{top.trial}, {'+'.join(top.recipes)}, ran {faster}")
        ranked, left_out = shares(_renumbered([lead, *ranked]))
    return ranked


def _leave_one_out(top: Recommendation, baseline: dict, measure, pairs: int, progress: Progress,
                   earlier: Optional[Rounds] = None) -> tuple[dict, dict]:
    """Each recipe's factor: the plan against itself without that recipe, paired round by round.
    The rounds look after FIRST_LOOK and stop there when every factor is already clear of 1x at
    Pocock's level for the two looks (as a verification does), or when none that is not is
    likely to be by the last (`shares.shares_futile`); else they run `pairs` rounds. `earlier`: such
    rounds run beside #1's verification, counted among them and not run again.
    Returns the shares, and by recipe the plan without it with its runs."""
    without = {recipe: without_recipe(top.plan, baseline, recipe) for recipe in top.recipes}
    measure = EpochEnds().measuring(measure)  # each plan's epoch end timed in its first runs only
    schedule = share_looks(pairs)
    progress(f"{'' if earlier is None else 'from the rounds beside its verification, '}measuring each recipe's share of #1 "
             f"by leaving it out: looking after {', '.join(map(str, schedule))} rounds:")

    def enough(so_far: Rounds) -> bool:
        return shares_done(so_far, top.recipes, schedule, progress)

    rounds = interleave(top.plan, {f"without {recipe}": plan for recipe, plan in without.items()}, measure, pairs,
                        progress, reference="#1", enough=enough, earlier=earlier, earlier_said="run beside its verification")
    confidence = reported_confidence(schedule, len(rounds.baseline), shares_settled(rounds, top.recipes, schedule))
    shares = {}
    for recipe in top.recipes:
        factors = factors_of(rounds, recipe)
        if any(out_of_memory(run) for run in rounds.candidates[f"without {recipe}"]):
            shares[recipe] = {"factor": math.inf, "interval": (math.inf, math.inf), "shown": True, "needed_for_budget": True}
        elif factors:
            factor, low, high = paired_interval(factors, confidence)
            peaks = [r.peak_memory_mb for r in rounds.candidates[f"without {recipe}"] if r.ok]
            shares[recipe] = {"factor": factor, "interval": (low, high), "shown": low > 1.0,
                              "peak_without_mb": max(peaks, default=0.0)}
    return shares, {recipe: (plan, rounds.candidates[f"without {recipe}"]) for recipe, plan in without.items()}
