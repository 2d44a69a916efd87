"""Verification: each candidate re-measured interleaved with the baseline, judged on a paired
interval, and kept as a recommendation; the ledger of verdicts a session reaches (some during
its search); and which candidates are still worth the rounds once a fix is verified."""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

from advisor import search
from advisor.config import AdvisorConfig
from advisor.harness import kept as kept_interpreters
from advisor.harness import run_measurement
from advisor.kinds import kind_of
from advisor.measure import BUSY_SHARE, QUIET_WAIT_S, Measurement, epoch_of, page_faults_of, wait_for_quiet
from advisor.plan import active_recipes, changes_of, combined_risk, names, plan_key, without_recipe
from advisor.recipes import Context, Recipe
from advisor.session.bundle import Session, round_measures
from advisor.session.gate import gate_candidates, rounding_envelope, worst_numerics
from advisor.session.kept_rounds import KeptRounds, arms_key
from advisor.session.margins import CONFIRM_MARGIN, EARLY_MARGIN, MEMORY_TIE_SAVING, SECOND_LOOK_MARGIN
from advisor.session.results import Hooks, Progress, Recommendation, Rejection
from advisor.session.shares import share_looks, shares_done
from advisor.verdict import (
    FUTILE_UNDER,
    chance_to_settle,
    chance_words,
    half_width,
    judge,
    level_stopping_at,
    look_confidence,
    look_schedule,
    paired_interval,
    reported_confidence,
    rounds_to_pin,
    settled,
)
from advisor.verify import NOT_RUN, OBJECTIVE, Envelope, Rounds, interleave, near_its_limit, speedup_basis, step_breakdown


@dataclass
class Verified:
    """The verdicts a session has reached so far (some during its search), and when it first
    had a fix to trust."""

    started: float
    progress: Progress = lambda line: None
    hooks: Hooks = Hooks()
    recommendations: list = field(default_factory=list)
    rejections: list = field(default_factory=list)
    baseline_runs: list = field(default_factory=list)
    first_s: Optional[float] = None
    announced: Optional[str] = None  # the candidate announced verified at its settled look, its rounds still running
    beside: dict = field(default_factory=dict)  # by trial: its rounds without each of its recipes (`shares_arms`), as `Rounds`
    to_pin: dict = field(default_factory=dict)  # by trial: a fix verified in the search, its rounds stopped at the verdict

    def settled(self, name: str, interval: tuple[float, float, float]) -> None:
        """A candidate's verdict settled verified, its number not yet pinned (`Stopping`): the
        moment a user has advice to trust, said now rather than after the pinning rounds."""
        if self.first_s is None:
            self.first_s, self.announced = time.time() - self.started, name
            speedup, low, high = interval
            self.progress(f"first verified fix {self.first_s:.0f} s after the start: {name} {speedup:.2f}x "
                          f"({low:.2f}-{high:.2f}x); its rounds go on to pin the number")

    def heard(self, name: str, plan: dict, verdict: dict, start: float, end: float) -> None:
        if name == self.announced:
            self.announced = None
            if not verdict["verified"]:  # the pinning rounds took it back: the user hears so
                self.progress(f"{name}, announced verified, is not after the rounds that pinned it: {verdict['reason']}")
                self.first_s = None
        if verdict["verified"] and self.first_s is None:  # the moment a user has advice to trust
            self.first_s = end - self.started
            self.progress(f"first verified fix {self.first_s:.0f} s after the start: {name} "
                          f"{verdict['speedup']:.2f}x ({verdict['low']:.2f}-{verdict['high']:.2f}x)")
        self.hooks.verdict(name, plan, verdict, start, end)

    def add(self, recommendations: list, baseline_runs: list, rejections: list) -> None:
        self.recommendations += recommendations
        self.baseline_runs += baseline_runs
        self.rejections += rejections

    def replace(self, trial: int, recommendations: list, baseline_runs: list, rejections: list) -> None:
        """A trial's verdict after more rounds of its verification (`pin_early_fix`): its earlier
        one, and the reference's runs of those rounds (read again among these), give way."""
        earlier = self.to_pin.pop(trial, [])
        self.recommendations = [r for r in self.recommendations if r.trial != trial]
        self.rejections = [r for r in self.rejections if r.trial != trial]
        self.baseline_runs = [run for run in self.baseline_runs if not any(run is kept for kept in earlier)]
        self.add(recommendations, baseline_runs, rejections)

    @property
    def trial_numbers(self) -> set[int]:
        """The trials judged so far: each became a recommendation or a rejection."""
        return {r.trial for r in self.recommendations} | {r.trial for r in self.rejections}

    @property
    def best(self) -> Optional[Recommendation]:
        """The fastest verified fix, if any."""
        return max((r for r in self.recommendations if r.verified), key=lambda r: r.speedup, default=None)

    @property
    def best_trial(self) -> Optional[int]:
        """The trial of the fastest verified fix, if any."""
        best = self.best
        return best.trial if best is not None else None

    @property
    def best_rate(self) -> float:
        """The fastest verified fix's mean rate in its verification rounds (0 if none)."""
        return max((r.samples_per_s for r in self.recommendations if r.verified and r.trial == self.best_trial), default=0.0)


def still_to_verify(candidates: list[search.TrialResult], trials: list[search.TrialResult], verified: Verified,
                    verify_top: int, baseline: dict) -> tuple[list[search.TrialResult], list[Rejection]]:
    """The candidates left to verify (best first): not judged already, and, once a fix is
    verified, only those whose trial beat it (its trial or its verification runs, whichever was
    faster) by EARLY_MARGIN, the fastest of them by SECOND_LOOK_MARGIN; `verify_top` of them at
    most (a fix verified early takes none of those places). The others are within a trial's
    noise of the fix: verifying them would cost rounds and most likely rank them under it. Those
    that ran faster than the fix in their trial, and those `verify_top` left out, come back as
    rejections that say so: no faster trial goes unexplained."""
    fresh = [t for t in candidates if t.number not in verified.trial_numbers]
    best = verified.best_trial
    passed_over: list[Rejection] = []
    if best is not None:
        fix_rate = max([t.samples_per_s for t in trials if t.number == best] + [verified.best_rate])
        kept = []
        for place, trial in enumerate(sorted(fresh, key=lambda t: t.samples_per_s, reverse=True)):
            margin = SECOND_LOOK_MARGIN if place == 0 else EARLY_MARGIN
            ratio = trial.samples_per_s / fix_rate if fix_rate > 0 else math.inf
            if ratio >= margin:
                kept.append(trial)
            elif ratio > 1.0:
                passed_over.append(Rejection.of(trial, baseline, (
                    f"not verified: {ratio:.2f}x the verified fix (trial #{best}) in its trial, under the "
                    f"{margin}x a single trial must beat it by (most likely no faster)")))
        fresh = kept
    chosen = fresh[: max(0, verify_top)]
    why = ("not verified: search.verify_top is 0 (trials only); set it above 0 to verify candidates" if verify_top <= 0
           else f"not verified: the {verify_top} place(s) of search.verify_top went to candidates faster in their "
                "trials; raise it to verify this one too")
    return chosen, passed_over + [Rejection.of(trial, baseline, why) for trial in fresh[len(chosen):]]


def confirm_beside_fix(candidates: list[search.TrialResult], verified: Verified, trials: list[search.TrialResult],
                       measure: Callable[[dict], Measurement], baseline: dict,
                       progress: Progress) -> tuple[list[search.TrialResult], list[Rejection]]:
    """Once a fix is verified, each candidate still to verify is run again right after that fix,
    and kept only where it beats it by CONFIRM_MARGIN there: a cheap second draw before the
    costly one. Those set aside are returned as rejections that say why."""
    best = verified.best_trial
    fix = next((t for t in trials if t.number == best), None)
    if fix is None or not candidates:
        return candidates, []
    kept, screened = [], []
    for trial in candidates:
        fix_run, run = measure(fix.plan), measure(trial.plan)
        ratio = run.samples_per_s / fix_run.samples_per_s if run.ok and fix_run.ok and fix_run.samples_per_s > 0 else (
            math.inf if run.ok else 0.0)
        in_trial = trial.samples_per_s / fix.samples_per_s if fix.samples_per_s > 0 else math.inf
        if ratio >= CONFIRM_MARGIN:
            kept.append(trial)
            continue
        why = (f"not verified: {in_trial:.2f}x the verified fix (trial #{fix.number}) in its trial, "
               f"{ratio:.2f}x run again beside it (under {CONFIRM_MARGIN}x: most likely no faster)")
        progress(f"  trial #{trial.number}: {why}")
        screened.append(Rejection.of(trial, baseline, why))
    return kept, screened


def verify_each(session: Session, candidates: list[search.TrialResult], verified: Optional[Verified] = None,
                give_way: bool = False, ahead: Optional[Recommendation] = None, ideal: bool = True,
                ) -> tuple[list[Recommendation], list[Measurement], list[Rejection]]:
    """Re-measures the candidates interleaved with the reference (the baseline, run as the user
    runs it: without the memory budget the candidates must keep), for as many rounds as the
    verdicts need (`_interleaved`), judged on the quiet ones. Once the
    search is done, the session's `Reference` says whose plan is the reference, whether fixes
    are judged on fitting the budget, and whether the baseline fed one reused batch joins every
    round: the ideal an input fix can reach, measured beside it, so the share of the gap a fix
    recovers compares like with like. `verified`, the session's ledger, hears each verdict, and
    the first fix verified as soon as its verdict settles. With `give_way` (a verification during
    the search), the rounds stop at a settled verdict, or after `search.pairs` at a straddling one;
    `ahead` (`pinned_ahead`) is the fix verified before that a new one must outrun to be pinned.
    The pinned candidate's rounds without each of its recipes go to the ledger (`rounds_beside`);
    `ideal` False runs no ideal (`pin_early_fix`). Returns the recommendations (unranked), the
    reference's runs and the rejections."""
    config, baseline = session.config, session.baseline
    memory_fix = session.reference is not None and session.reference.memory_fix
    plans = {f"#{t.number}": t for t in candidates}
    announce = verified.settled if verified is not None else lambda name, interval: None
    every_round, stopping, ideal_speedup, started, finished = _interleaved(session, plans, memory_fix, announce, give_way, ahead,
                                                                           with_shares=verified is not None, ideal=ideal)
    ideal_speedup, ideal_source = _ideal_of(session, ideal_speedup, give_way or not ideal)
    rounds, set_aside = every_round.quiet(), every_round.set_aside()
    if verified is not None:
        verified.beside.update(rounds_beside(rounds, plans, baseline))
    basis = basis_of(config, rounds.baseline)
    recommendations, rejections = [], []
    for name, trial in plans.items():
        runs = rounds.candidates[name]
        recipes = active_recipes(trial.plan, baseline)
        numerics = worst_numerics(runs, rounds.baseline, combined_risk(recipes), config, reference_envelope(session))
        verdict = judge(
            name, rounds.ratios(name, basis), config.search.min_speedup, numerics, memory_fix,
            [r.peak_memory_mb for r in runs if r.ok], config.constraints.max_memory_mb,
            failures=every_round.failures(name), pairs=len(runs), confidence=stopping.confidence,
            set_aside=set_aside,
        )
        if verified is not None:
            verified.heard(name, trial.plan, verdict.to_dict(), started, finished)
        if numerics is not None and not numerics.passed:
            rejections.append(Rejection.of(trial, baseline, verdict.reason))
            continue
        recommendations.append(Recommendation(
            rank=0, recipes=names(recipes), plan=trial.plan, changes=changes_of(trial.plan, baseline),
            speedup=verdict.speedup, interval=(verdict.low, verdict.high), verified=verdict.verified,
            reason=verdict.reason, numerics=asdict(numerics) if numerics else {},
            peak_memory_mb=verdict.peak_memory_mb, snippet=_snippet_for(trial.plan, recipes, session.context),
            trial=trial.number, samples_per_s=_mean_rate(runs),
            one_off=_one_off_costs(recipes, runs, rounds.baseline, kind_of(config.kind).per, trial.measurement),
            step_breakdown_ms=step_breakdown(runs), failed_runs=len(verdict.failures),
            busy_share=max((r.other_cpu_share for r in [*runs, *rounds.baseline] if r.ok), default=0.0),
            rounds=len(runs), set_aside_rounds=set_aside[0], set_aside_share=set_aside[1],
            ideal_speedup=ideal_speedup, ideal_source=ideal_source,
            gap_recovered=gap_recovered(verdict.speedup, 1.0, ideal_speedup),
            latency_ms=latency_of(runs), load_curve=load_curve_of(runs), speedup_basis=basis, epoch=epoch_of(runs),
            page_faults_per_step=page_faults_of(runs), status=verdict.status.value, confidence=verdict.confidence,
            settle_chance=stopping.futile.get(name), pinned=stopping.pinned_name == name and len(runs) >= (stopping.pinned or 0),
        ))
    return recommendations, rounds.baseline, rejections


@dataclass
class Stopping:
    """When a verification has rounds enough, asked after each round: at the rounds of the
    `look_schedule`, once every verdict is settled at Pocock's level for the whole schedule and
    the fastest verified candidate has the rounds its first settled interval says pin its
    number to `search.precision` (while the next look's rounds fit the time budget); past
    `search.pairs`, growing only while a verdict straddles the bar (not in a verification
    during the search: `give_way`) or those rounds are not run yet, and the time budget allows.
    A round that other processes disturbed is set aside and run again once the machine is
    quiet, `search.pairs` of them at most. Memory fixes, judged on every run, take every round."""

    config: AdvisorConfig
    names: list[str]
    memory_fix: bool
    progress: Progress
    started: float = field(default_factory=time.time)
    quiet_rounds: int = 0  # so far
    settled_at_stop: bool = False
    pinned: Optional[int] = None  # the rounds the fastest verified candidate's number needs (`rounds_to_pin`)
    pinned_name: Optional[str] = None  # that candidate
    announce: Callable[[str, tuple[float, float, float]], None] = lambda name, interval: None  # hears it, settled
    basis: str = OBJECTIVE  # what the speedups are ratios of, as the baseline's runs so far say (`speedup_basis`)
    give_way: bool = False  # a verification during the search: a verdict still straddling after search.pairs stops there
    futile: dict = field(default_factory=dict)  # verdicts whose rounds stopped as unlikely to be decided: each one's chance
    limits: dict = field(default_factory=dict)  # arms that run in their first rounds only: the ideal's, and those `_end_arms` ends
    ahead: Optional[Recommendation] = None  # a fix verified before, its number pinned: what a candidate must outrun to be pinned

    def __post_init__(self) -> None:
        search_config = self.config.search
        self.schedule = look_schedule(search_config.pairs, search_config.pairs if self.memory_fix else search_config.max_pairs)
        self.deciding = look_confidence(len(self.schedule))

    @property
    def confidence(self) -> float:
        """The level of the intervals the verdicts report (`reported_confidence`)."""
        return reported_confidence(self.schedule, self.quiet_rounds, self.settled_at_stop)

    @property
    def last_look(self) -> int:
        """The rounds the verification runs at most: `search.pairs` during the search (`give_way`)."""
        return self.config.search.pairs if self.give_way else self.schedule[-1]

    def round_of(self, rounds_run: int) -> int:
        """What a round's progress line counts up to: the stop it leads to (set-aside rounds added)."""
        return self.next_stop(self.quiet_rounds) + rounds_run - 1 - self.quiet_rounds

    def next_stop(self, done: int) -> int:
        """The rounds after `done` at which the verification next asks whether to stop: the next
        look, or the rounds that pin the fastest verified candidate's number where they come first."""
        following = next((look for look in self.schedule if look > done), self.schedule[-1])
        return min(following, self.pinned) if self.pinned_name is not None and done < (self.pinned or 0) else following

    def __call__(self, rounds: Rounds) -> bool:
        search_config, quiet = self.config.search, rounds.quiet()
        self.quiet_rounds = done = len(quiet.baseline)
        self._ended_before(rounds)
        if rounds.disturbance(-1) >= BUSY_SHARE:  # run it again, on a quiet machine, within the budget
            if rounds.set_aside()[0] > search_config.pairs or time.time() - self.started > search_config.time_budget_s:
                return True
            wait_for_quiet(QUIET_WAIT_S, self.progress)
            return False
        if done not in self.schedule:
            return self._pinned_between_looks(rounds, quiet, done)
        self.basis = basis = basis_of(self.config, quiet.baseline)
        self.settled_at_stop = all(settled(quiet.ratios(name, basis), search_config.min_speedup, rounds.failures(name),
                                           self.deciding) for name in self.names)
        if done == self.schedule[-1]:
            return True
        chances = self.chances_to_decide(rounds, quiet, basis)
        all_futile = max(chances.values(), default=1.0) < FUTILE_UNDER
        if not self.memory_fix:  # futile ones alone end past search.pairs, and only while another goes on
            ending_futile = done >= search_config.pairs and not all_futile and not self.give_way
            self._end_arms(rounds, quiet, basis, {name: chance for name, chance in chances.items()
                                                  if ending_futile and chance < FUTILE_UNDER})
        if self.settled_at_stop and not self.memory_fix:
            if self.give_way:  # during the search: its number is pinned at the end, where it still leads (`pin_early_fix`)
                return True
            if self.pinned is None:  # fixed once, at the first settled look (`rounds_to_pin`)
                claims = {name: quiet.ratios(name, basis) for name in self.names if not rounds.failures(name)}
                self.pinned_name, self.pinned = rounds_to_pin(claims, search_config.min_speedup, search_config.precision,
                                                              functools.partial(level_stopping_at, self.schedule))
                if self.pinned_name is not None and done < self.pinned and not basis_may_change(quiet.baseline):
                    self.announce(self.pinned_name, paired_interval(quiet.ratios(self.pinned_name, basis), self.confidence))
                if self.pinned_name is not None and self.behind(self.pinned_name, quiet, basis):
                    self.pinned_name, self.pinned = None, done
            if done >= self.pinned:
                return True
            self._end_outrun(rounds, quiet, basis)
            reach = half_width(quiet.ratios(self.pinned_name, basis), self.confidence)
            return not self._grow(done, len(rounds.baseline), (
                f"{self.pinned_name} is verified, its speedup known to +-{reach:.0%}; about {self.pinned} rounds pin it "
                f"to +-{search_config.precision:.0%} (search.precision){self._capped(self.pinned)}"))
        if all_futile and not self.memory_fix and (done >= search_config.pairs or self.give_way):
            self.futile.update(chances)
            self.progress(f"  the rounds stop: {self.last_look} rounds ({'search.pairs' if self.give_way else 'search.max_pairs'}) "
                          "would hardly decide a verdict straddling the bar "
                          f"({', '.join(f'{name}: {chance_words(chance)}' for name, chance in chances.items())})")
            return True
        if done < search_config.pairs or self.memory_fix:
            return False
        if self.give_way:
            return True
        return not self._grow(done, len(rounds.baseline), "a verdict still straddles the bar")

    def _capped(self, rounds_to_pin: int) -> str:
        """Said where the rounds that would pin a number are more than the verification may run:
        it narrows the interval as far as `search.max_pairs` goes, and no further."""
        most = self.schedule[-1]
        return f"; search.max_pairs stops them at {most}" if rounds_to_pin > most else ""

    def _pinned_between_looks(self, rounds: Rounds, quiet: Rounds, done: int) -> bool:
        """Whether the rounds stop between looks, at those `rounds_to_pin` fixed at the settled
        look: their count was set before they ran, so stopping there reads nothing into them;
        the stop is a look of its own (`reported_confidence`), and every verdict must still be
        settled there, or the rounds go on to the next look."""
        if self.memory_fix or self.pinned_name is None or done != self.pinned:
            return False
        self.basis = basis = basis_of(self.config, quiet.baseline)
        self.settled_at_stop = all(settled(quiet.ratios(name, basis), self.config.search.min_speedup,
                                           rounds.failures(name), self.deciding) for name in self.names)
        return self.settled_at_stop

    def behind(self, name: str, quiet: Rounds, basis: str) -> bool:
        """Whether the fix verified before (`ahead`) is the one a user adopts over `name`: faster,
        on the same basis, and `name` not leaner by MEMORY_TIE_SAVING (`ranking.rank`'s rule for
        a lean fix to lead). Then `name`'s rounds stop at its verdict (said), rather than pin a
        number ranked under one already pinned."""
        ahead = self.ahead
        if ahead is None or ahead.speedup_basis != basis:
            return False
        speedup = paired_interval(quiet.ratios(name, basis))[0]
        peaks = [run.peak_memory_mb for run in quiet.candidates[name] if run.ok]
        if speedup > ahead.speedup or not peaks:
            return False
        if max(peaks) < (1 - MEMORY_TIE_SAVING) * ahead.peak_memory_mb:
            return False
        self.progress(f"  {name} is verified at {speedup:.2f}x, under the {ahead.speedup:.2f}x of trial #{ahead.trial}, "
                      "verified before and no heavier: its rounds stop at the verdict (the number to adopt is pinned)")
        return True

    def chances_to_decide(self, rounds: Rounds, quiet: Rounds, basis: str) -> dict[str, float]:
        """Each verdict still straddling the bar, and its chance that more rounds, up to the
        schedule's last look, decide something (`chance_to_settle`): where every one is under
        FUTILE_UNDER, the rounds to come would most likely end as they stand, at several times
        the cost (the coverage is unchanged: the intervals are drawn at the whole schedule's level
        wherever the rounds stop). Settling under the bar decides something only while the session
        can still say that no fix reaches it: once one verdict is left straddling (or is about to
        be), only a verdict that could clear the bar is worth more rounds."""
        bar, last = self.config.search.min_speedup, self.last_look
        ratios_of = {name: quiet.ratios(name, basis) for name in self.names}
        straddling = {name: ratios for name, ratios in ratios_of.items()
                      if not settled(ratios, bar, rounds.failures(name), self.deciding)}
        either = {name: chance_to_settle(ratios, bar, last, self.deciding) for name, ratios in straddling.items()}
        if not self.futile and min(either.values(), default=1.0) >= FUTILE_UNDER:
            return either
        return {name: chance_to_settle(ratios, bar, last, self.deciding, above_only=True) for name, ratios in straddling.items()}

    def _end_arms(self, rounds: Rounds, quiet: Rounds, basis: str, futile: dict[str, float]) -> None:
        """Ends, at a look, the candidates whose verdict more rounds would not make a verified fix:
        flaky, settled under the bar, or unlikely to be decided (`futile`: under FUTILE_UNDER, while
        another verdict could still settle); they run in no later round (`limits`, which
        `interleave` reads each round), while the others go on. Their verdicts stand on their own
        rounds, at the level the rest report."""
        bar, said = self.config.search.min_speedup, []
        for name in [name for name in self.names if name not in self.limits]:
            ratios, ran = quiet.ratios(name, basis), len(rounds.candidates[name])
            if rounds.failures(name) or (len(ratios) >= 2 and paired_interval(ratios, self.deciding)[2] < bar):
                self.limits[name] = ran
                said.append(f"{name} (flaky)" if rounds.failures(name) else f"{name} (settled under the bar)")
            elif name in futile:
                self.limits[name], self.futile[name] = ran, futile[name]
                said.append(f"{name} ({chance_words(futile[name])} chance that {self.schedule[-1]} rounds decide it)")
        if said and any(name not in self.limits for name in self.names):
            self.progress(f"  no more rounds for {', '.join(said)}: more would not make a verified fix; the others go on")

    def _end_outrun(self, rounds: Rounds, quiet: Rounds, basis: str) -> None:
        """Ends, at a look, the verified candidates that cannot lead the ranking: their interval
        (at the deciding level) ends more than `search.precision` under the speedup of the
        candidate whose number the rounds go on to pin, so the rounds that pin that number to
        +-precision would not make the two tied (`ranking.rank`: neither faster nor a leaner
        tie). Their verdicts are settled; those rounds would only narrow their intervals, at a
        run each a round. Not where the speedups are of requests answered (the lowest p95 leads
        there, whatever the speedup)."""
        if basis != OBJECTIVE or self.pinned_name is None:
            return
        lead = paired_interval(quiet.ratios(self.pinned_name, basis))[0]
        outrun = []
        for name in [name for name in self.names if name != self.pinned_name and name not in self.limits]:
            speedup, low, high = paired_interval(quiet.ratios(name, basis), self.deciding)
            if low >= self.config.search.min_speedup and high * (1 + self.config.search.precision) < lead:
                self.limits[name] = len(rounds.candidates[name])
                outrun.append(f"{name} ({speedup:.2f}x, {low:.2f}-{high:.2f}x)")
        if outrun:
            self.progress(f"  no more rounds for {', '.join(outrun)}: verified, and more than search.precision "
                          f"under the {lead:.2f}x of {self.pinned_name}, whose number the rounds go on to pin")

    def _ended_before(self, rounds: Rounds) -> None:
        """Keeps ended the candidates whose runs stop short of the reference's: ended by
        `_end_arms` before a resume (`KeptRounds.earlier` reads their rounds so)."""
        for name in self.names:
            if len(rounds.candidates[name]) < len(rounds.baseline):
                self.limits.setdefault(name, len(rounds.candidates[name]))

    def longer_runs(self, done: int) -> bool:
        """Whether the rounds after `done` serve twice the requests per run: a service's past
        `search.pairs`, where a p95 over more requests rests on more of them; not when its
        speedups are of the requests answered a second (a saturated baseline's p95 would only
        measure the longer run)."""
        return self.config.workload.SERVED and done >= self.config.search.pairs and self.basis == OBJECTIVE

    def _grow(self, done: int, rounds_run: int, why: str) -> bool:
        """Whether the rounds up to the next stop fit the time budget (said, with `why`, when they do)."""
        served = self.longer_runs(done)
        following = self.next_stop(done)
        elapsed = time.time() - self.started
        if elapsed + elapsed / rounds_run * (following - done) * (2 if served else 1) > self.config.search.time_budget_s:
            return False
        more = following - done
        self.progress(f"  {why}: {more} more round{'' if more == 1 else 's'}"
                      + (", serving twice the requests per run" if served else ""))
        return True


# The ideal (the reference fed one reused batch) gives the share of the gap to it that a fix
# recovers: a ceiling, not a claim. It runs in the first IDEAL_ROUNDS rounds, beside the
# reference's runs there (its ratio to them read +-4-7% a round on the quickstart), not in the
# rounds a verdict or its precision asks for after them; and over half the job's timed steps
# (IDEAL_STEPS at least): compute alone on one batch runs steadily from step to step. On the
# quickstart that spares 0.8 s of a 7 s round from the third round on, 0.3 s before it.
# A verification during the search runs none: its first look is the user's first verified fix,
# and the ideal's runs (0.6 s a round on the quickstart) would only delay it; its gap is read
# against the ideal the diagnosis measured (`diagnosed_ideal`).
IDEAL_ROUNDS = 2
IDEAL_STEPS = 10


def ideal_steps(steps: int) -> int:
    """The ideal's timed steps, for a job timed over `steps`."""
    return min(steps, max(IDEAL_STEPS, steps // 2))


# An epoch's end (a loader's workers stopped and started again, their queue refilled) is timed
# after each training run's window, on a short epoch of its own: on the quickstart's fix 0.66 s
# of a 1.57 s run, more than its window. It is a property of the plan, not of the round, so a
# verification times it in each plan's first EPOCH_RUNS quiet runs and charges the later runs
# their mean: each round then costs a loader plan's run that much less.
EPOCH_RUNS = 2


@dataclass
class EpochEnds:
    """What an epoch's end cost each plan in the runs of one verification that timed it, by plan;
    `measuring` wraps a round's measure so that a plan timed EPOCH_RUNS times is charged their
    mean, untimed, from then on."""

    timed: dict = field(default_factory=dict)  # plan key: the seconds each of its quiet runs timed

    def known(self, plan: dict) -> Optional[float]:
        """The mean of the plan's timed epoch ends, once EPOCH_RUNS runs timed one; None before."""
        ends = self.timed.get(plan_key(plan), [])
        return sum(ends) / len(ends) if len(ends) >= EPOCH_RUNS else None

    def heard(self, plan: dict, run: Measurement) -> None:
        """Keeps the epoch end `run` timed, where it timed one on a quiet machine."""
        end_s = run.epoch.get("end_s")
        if run.ok and end_s is not None and run.epoch.get("timed", True) and run.other_cpu_share < BUSY_SHARE:
            self.timed.setdefault(plan_key(plan), []).append(end_s)

    def measuring(self, measure: Callable[..., Measurement]) -> Callable[[dict], Measurement]:
        def measured(plan: dict) -> Measurement:
            known = self.known(plan)
            run = measure(plan) if known is None else measure(plan, epoch_end_s=known)
            self.heard(plan, run)
            return run

        return measured


def measure_ideal(config: AdvisorConfig, plan: dict) -> Measurement:
    """One run of the ideal: `plan` fed one reused batch, forked from the session's fork server
    (a new interpreter's 3-4 s spared every round: a ceiling, not a claim)."""
    return run_measurement(config, plan, "synthetic", ideal_steps(config.measure.steps), config.measure.timeout_s)


def _interleaved(session: Session, plans: dict[str, search.TrialResult], memory_fix: bool,
                 announce: Callable[[str, tuple[float, float, float]], None], give_way: bool = False,
                 ahead: Optional[Recommendation] = None, with_shares: bool = False, ideal: bool = True,
                 ) -> tuple[Rounds, Stopping, Optional[float], float, float]:
    """The verification rounds: the reference and each candidate (and the ideal, for an input
    fix) back to back, until `Stopping` says they are enough (past `search.pairs`, a service's
    runs serve twice the requests: `Stopping.longer_runs`). With `with_shares`, the candidate
    whose number the rounds go on to pin (the fastest verified), where it combines recipes, runs
    without each of them too, in up to `search.pairs` of those rounds (`shares_arms`). Returns
    the rounds, the level of the intervals to report, the ideal's speedup over the reference, and
    when the rounds began and ended. `announce` hears the fastest verified candidate as soon as
    its verdict settles."""
    config, reference = session.config, session.reference
    with_ideal = reference is not None and reference.with_ideal and not give_way and ideal
    reference_plan = reference.run.plan if reference is not None and reference.run is not None else session.baseline
    arms = {name: t.plan for name, t in plans.items()}
    ideal_plan = dict(reference_plan)  # told apart by identity: the same plan, another mode
    if with_ideal:
        arms["ideal"] = ideal_plan
    limits = {"ideal": IDEAL_ROUNDS}  # arms of the first rounds only, and the candidates `Stopping` ends (interleave reads it)
    stopping = Stopping(config, list(plans), memory_fix, session.progress, announce=announce, give_way=give_way,
                        limits=limits, ahead=ahead)
    shares = {name: shares_arms(name, trial, session.baseline) for name, trial in plans.items()} if with_shares else {}
    for without in shares.values():
        arms.update(without)
    joins = {arm: math.inf for without in shares.values() for arm in without}  # until the rounds pin that candidate's number

    def enough(rounds: Rounds) -> bool:
        stop = stopping(rounds)
        if not stop and stopping.pinned_name in shares:
            _pace_shares(rounds, stopping.pinned_name, shares[stopping.pinned_name], joins, limits, plans, session)
        return stop
    epochs = EpochEnds()
    planned = (epochs.measuring(session.round_measure), epochs.measuring(session.round_reference))
    longer = round_measures(more_requests(config)) if config.workload.SERVED else planned

    def measure(plan: dict, reference_run: bool = False) -> Measurement:
        if plan is ideal_plan:
            return measure_ideal(config, plan)
        capped, uncapped = longer if stopping.longer_runs(stopping.quiet_rounds) else planned
        return uncapped(plan) if reference_run else capped(plan)

    beside = f" and, in the first {IDEAL_ROUNDS}, the ideal" if with_ideal else ""
    session.progress(f"verifying {len(plans)} candidate(s), interleaved with the baseline{beside}: looking after "
                     f"{', '.join(map(str, stopping.schedule))} rounds, stopping once every verdict is clear (a round other "
                     "processes disturb is run again):")
    kept = KeptRounds(session.study, arms_key(reference_plan, arms)) if session.study is not None else None
    try:
        rounds = interleave(reference_plan, arms, measure, stopping.schedule[-1] + config.search.pairs, session.progress,
                            measure_reference=lambda plan: measure(plan, reference_run=True), enough=enough,
                            rounds_total=stopping.round_of, earlier=kept.earlier("baseline", list(arms)) if kept else None,
                            keep=kept.keeper() if kept else lambda index, runs: None, first_rounds_only=limits,
                            later_rounds_only=joins)
    finally:
        kept_interpreters.close_all()
    ideal_ratios = rounds.quiet().ratios("ideal") if with_ideal else []
    ideal = paired_interval(ideal_ratios)[0] if ideal_ratios else None
    return rounds, stopping, ideal, stopping.started, time.time()


def shares_arms(name: str, trial: search.TrialResult, baseline: dict) -> dict[str, dict]:
    """Where a candidate combines recipes, the candidate without each one, named after both ({}
    where it changes one recipe or none). Those of the candidate whose number the rounds pin (the fastest verified, #1 unless a
    later fix outruns it) join once its verdict settles (the user's first verified fix is not
    held up by them), in the rounds that go on to pin its number, and give each recipe's share
    of it there (`ranking._leave_one_out` goes on from them only where they did not settle), in
    rounds that pay their interpreters' imports anyway (a round of their own, later, pays them
    again). Where the rounds stop at the verdicts, none run."""
    recipes = active_recipes(trial.plan, baseline)
    if len(recipes) < 2:
        return {}
    return {shares_arm(name, r.name): without_recipe(trial.plan, baseline, r.name) for r in recipes}


def shares_arm(name: str, recipe: str) -> str:
    return f"{name} without {recipe}"


def _pace_shares(rounds: Rounds, name: str, arms: dict[str, dict], joins: dict[str, float], limits: dict[str, int],
                 plans: dict[str, search.TrialResult], session: Session) -> None:
    """The pinned candidate's shares' `arms`: they join the rounds once its verdict settles, for
    `search.pairs` rounds at most, and stop sooner where `_shares_shown` says they are enough."""
    done = len(rounds.baseline)
    if arms and all(joins[arm] == math.inf for arm in arms):
        joins.update(dict.fromkeys(arms, done))
        limits.update(dict.fromkeys(arms, done + session.config.search.pairs))
    if arms and max(limits[arm] for arm in arms) > done and _shares_shown(rounds, name, plans, session):
        limits.update(dict.fromkeys(arms, done))


def _shares_shown(rounds: Rounds, name: str, plans: dict[str, search.TrialResult], session: Session) -> bool:
    """Whether the pinned candidate's shares' arms have run rounds enough, by the leave-one-out's
    own rule (`shares.shares_done`) on the quiet rounds they ran in: its rounds of its own would
    stop there, so these stop there too, and the rounds that go on pinning its number run
    without them (the leave-one-out, reading them, says why)."""
    beside = rounds_beside(rounds.quiet(), {name: plans[name]}, session.baseline).get(plans[name].number)
    recipes = tuple(r.name for r in active_recipes(plans[name].plan, session.baseline))
    return beside is not None and shares_done(beside, recipes, share_looks(session.config.search.pairs), lambda line: None)


def rounds_beside(rounds: Rounds, plans: dict[str, search.TrialResult], baseline: dict) -> dict[int, Rounds]:
    """By trial, the quiet rounds its shares' arms ran in, as the leave-one-out reads them: the
    candidate's runs there as the reference, and its runs without each recipe."""
    beside = {}
    for name, trial in plans.items():
        without = {recipe.name: rounds.candidates.get(shares_arm(name, recipe.name), [])
                   for recipe in active_recipes(trial.plan, baseline)}
        ran = [index for index in range(len(rounds.candidates[name]))
               if all(index < len(runs) and runs[index].reason != NOT_RUN for runs in without.values())]
        if len(without) > 1 and ran:
            beside[trial.number] = Rounds([rounds.candidates[name][i] for i in ran],
                                          {f"without {recipe}": [runs[i] for i in ran] for recipe, runs in without.items()})
    return beside


def _ideal_of(session: Session, in_rounds: Optional[float], runs_none: bool) -> tuple[Optional[float], str]:
    """The ideal's speedup over the reference and where it was read: beside it in the rounds,
    else, for a verification that runs none (`runs_none`: during the search, and its rounds
    going on at the end), the diagnosis's."""
    if in_rounds is not None:
        return in_rounds, "rounds"
    diagnosed = diagnosed_ideal(session) if runs_none else None
    return diagnosed, "diagnosis" if diagnosed is not None else ""


def diagnosed_ideal(session: Session) -> Optional[float]:
    """The ideal over the baseline as the diagnosis found it (its synthetic-batch run over its full
    run), for an input-bound session; None where it has none."""
    reference, evidence = session.reference, session.facts.evidence
    ideal = evidence.derived.get("ideal_samples_per_s")
    full = evidence.full.samples_per_s if evidence.full is not None and evidence.full.ok else 0.0
    if reference is None or not reference.with_ideal or not ideal or full <= 0:
        return None
    return ideal / full


def reference_envelope(session: Session) -> Callable[[], Optional[Envelope]]:
    """The rounding envelope candidates may be judged in, measured when first asked: the
    reference's once the search is done; during it, the one an early gate measured, if any."""
    def envelope() -> Optional[Envelope]:
        reference = session.reference
        return rounding_envelope(session, reference.run) if reference is not None else session.measured_envelope()

    return envelope


def basis_of(config: AdvisorConfig, baseline_runs: list[Measurement]) -> str:
    """What this verification's speedups are ratios of (`speedup_basis`)."""
    return speedup_basis(config.objective, config.workload.SERVED and config.load.mode == "open", baseline_runs)


def basis_may_change(baseline_runs: list[Measurement]) -> bool:
    """Whether the baseline's runs so far disagree on being near their limit (`near_its_limit`):
    what the speedups are ratios of (`speedup_basis`) may still change with the rounds to come,
    so a verdict is not announced before its last round."""
    return len({near_its_limit(run) for run in baseline_runs if run.ok and run.latency}) > 1


def more_requests(config: AdvisorConfig) -> AdvisorConfig:
    """The config whose runs serve twice the timed requests: a p95 over more requests rests on more of them."""
    return dataclasses.replace(config, measure=dataclasses.replace(config.measure, requests=2 * config.measure.requests))


def _snippet_for(plan: dict, recipes: tuple[Recipe, ...], context: Optional[Context] = None) -> str:
    """The code to paste; a recipe says more where the context has it (the user's own step by
    name, the rewritten row functions)."""
    def code(recipe: Recipe) -> str:
        told = recipe.snippet_in(plan, context) if context is not None and recipe.snippet_in else None
        return told or recipe.snippet(plan)

    return "\n\n".join(f"# {r.name}: {r.summary}\n{code(r)}" for r in recipes)


def latency_of(runs: list[Measurement]) -> dict:
    """Inference: each latency figure averaged over the runs that have one; for objective
    capacity also the capacity's mean and the rate the last run saturated at."""
    good = [r.latency for r in runs if r.ok and r.latency]
    keys = ("p50_ms", "p95_ms", "p99_ms", "cold_start_ms")
    figures = {key: sum(lat[key] for lat in good) / len(good) for key in keys} if good else {}
    if any(lat.get("saturated") for lat in good) and not any(lat.get("capacity") for lat in good):
        figures.update(saturated=True, offered_per_s=good[-1].get("rate_per_s"),
                       served_per_s=sum(lat["served_per_s"] for lat in good) / len(good))
    if good and all(lat.get("full_load_per_s") for lat in good):
        figures.update(full_load_per_s=sum(lat["full_load_per_s"] for lat in good) / len(good),
                       offered_per_s=good[-1].get("rate_per_s"))
    found = [lat["capacity"] for lat in good if lat.get("capacity")]
    if found:
        figures.update(capacity_per_s=sum(f["per_s"] for f in found) / len(found), slo_ms=found[-1]["slo_ms"],
                       saturates_at_per_s=found[-1]["saturates_at_per_s"],
                       guided=found[-1].get("predicted_per_s") is not None)
    return figures


def load_curve_of(runs: list[Measurement]) -> list[dict]:
    """The rates the last run's capacity search replayed, by rate (its load curve); [] without one."""
    found = [r.latency["capacity"] for r in runs if r.ok and r.latency.get("capacity")]
    return found[-1]["points"] if found else []


def _mean_rate(runs: list[Measurement]) -> float:
    good = [r.samples_per_s for r in runs if r.ok]
    return sum(good) / len(good) if good else 0.0


def gap_recovered(speedup: float, baseline_rate: float, ideal_rate: Optional[float]) -> Optional[float]:
    """The share of the gap between the baseline and the ideal (synthetic-batch) throughput that
    a fix recovers: the physical limit for input fixes is the ideal."""
    if not ideal_rate or not baseline_rate or ideal_rate <= baseline_rate:
        return None
    return (speedup * baseline_rate - baseline_rate) / (ideal_rate - baseline_rate)


def verify_candidates(session: Session, candidates: list[search.TrialResult], verified: "Verified") -> None:
    """Verifies the candidates (when there are any) into the session's ledger, beside the fix
    verified so far (`pinned_ahead`)."""
    if candidates:
        verified.add(*verify_each(session, candidates, verified, ahead=pinned_ahead(verified)))


def pin_early_fix(session: Session, trials: list[search.TrialResult], verified: "Verified") -> None:
    """Where the fix to adopt is one verified during the search, whose rounds stopped at its
    verdict, they go on from where they stopped (the rounds kept in the study: the same
    reference and arms, no ideal) until its number is pinned to `search.precision`. Left to the
    end, after the candidates found later: on the augmented CNN and the quickstart an early
    fix's 8-12 pinning rounds held the search, and a later fix led."""
    best = verified.best
    if best is None or best.trial not in verified.to_pin or session.config.search.precision <= 0:
        return
    trial = next((t for t in trials if t.number == best.trial), None)
    if trial is None:
        return
    session.progress(f"#{best.trial}, verified during the search, leads: its rounds go on to pin its number")
    verified.replace(best.trial, *verify_each(session, [trial], verified, ideal=False))
    undone = [r for r in verified.recommendations if r.trial == best.trial and not r.verified]
    if undone:
        session.progress(f"#{best.trial}, verified during the search, is not after the rounds that went on to pin it: "
                         f"{undone[0].reason}")
        if verified.best is None:
            verified.first_s = None


def pinned_ahead(verified: "Verified") -> Optional[Recommendation]:
    """The fastest verified fix so far, where its rounds pinned its number to `search.precision`
    (`Recommendation.pinned`); None otherwise (a later candidate's number may then be the one to
    pin). Not an early fix whose rounds stopped at its verdict: its number, from 3-5 rounds, is
    too loose to stop a later candidate's rounds at theirs (`pin_early_fix` pins it after, where
    it still leads)."""
    best = verified.best
    return best if best is not None and best.pinned else None


def _one_off_costs(recipes: tuple[Recipe, ...], runs: list[Measurement], reference_runs: list[Measurement],
                   per: str, trial_run: Optional[Measurement] = None) -> dict:
    """Each recipe's one-off cost (a compile, a cache's build), by its name (`Recipe.one_off_cost`),
    from the runs that paid it, its trial's too: not a run in a kept interpreter (it found an
    earlier run's work done), nor one whose compiled graphs all came from torch.compile's cache
    (a script's runs share one a session: the first compiles). What such a run paid is the cost
    once cached (`cached_seconds`); where no run paid in full, the cost is that one, said so."""
    fresh = [run for run in runs if run.interpreter != "kept"]
    paid = [run for run in [*fresh, *([trial_run] if trial_run is not None else [])] if not run.compiled_from_cache]
    cached = [run for run in fresh if run.compiled_from_cache]
    costs = {}
    for recipe in (recipe for recipe in recipes if recipe.one_off_cost):
        full, warm = recipe.one_off_cost(paid, reference_runs, per), recipe.one_off_cost(cached, reference_runs, per)
        if full and warm:
            full["cached_seconds"] = warm["seconds"]
        elif warm:
            full = {**warm, "cached": True}
        if full:
            costs[recipe.name] = full
    return costs


def choose_candidates(session: Session, trials: list[search.TrialResult],
                      verified: Verified) -> tuple[list[search.TrialResult], list[Rejection], list[Rejection]]:
    """The trials still worth verifying: through the numerics gate, not judged already, and, once
    a fix is verified, clearly faster than it in their trial and again beside it. Returns them,
    the rejections, and the faster trials passed over (each with why)."""
    config, baseline, reference = session.config, session.baseline, session.reference
    candidates, rejected = gate_candidates(trials, reference.run, baseline, config, reference.memory_fix,
                                           reference_envelope(session))
    rejected = [r for r in rejected if r.trial not in verified.trial_numbers]
    candidates, passed_over = still_to_verify(candidates, trials, verified, config.search.verify_top, baseline)
    candidates, screened = confirm_beside_fix(candidates, verified, trials, session.measure, baseline, session.progress)
    return candidates, rejected + screened, passed_over
