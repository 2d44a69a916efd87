"""What a session knows, in one frozen bundle that every stage takes: the config, the facts
planned before the trials, the diagnoses, how a plan is measured, and (once the search is done)
whose results the candidates must reproduce."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from advisor.config import AdvisorConfig
from advisor.findings import Diagnosis
from advisor.kinds import kind_of
from advisor.measure import Measurement
from advisor.plan import plan_key
from advisor.recipes import Context
from advisor.session.planning import SessionFacts
from advisor.session.results import Hooks, Progress
from advisor.verify import Envelope


def measure_with(config: AdvisorConfig, capped: bool = True, fresh: Union[bool, str] = False) -> Callable[[dict], Measurement]:
    """How a plan is measured: a full run in a fresh child, killed at `constraints.max_memory_mb`
    when `capped` (every trial and candidate); uncapped for the job as the user runs it today,
    the reference that candidates are compared with. `fresh`: in a new interpreter (`round_measures`)."""
    return kind_of(config.kind).measure(config, capped, fresh)


def round_measures(config: AdvisorConfig) -> tuple[Callable[[dict], Measurement], Callable[[dict], Measurement]]:
    """How the rounds whose ratios are reported measure a plan (capped) and the reference
    (uncapped): with `measure.fresh_rounds`, every run in a new interpreter. A child forked from
    the session's template process inherits its memory layout and hash seed, one draw for every
    run of the session, and a job's speed can hang on that draw (glibc returning and faulting in
    its heap each step, or not); forked rounds agree with each other, not with the user's own
    `python train.py`, and a new template each round does not cure it: its forks still start
    from a heap that imported torch before them (`python -m experiments.layout`)."""
    fresh = round_interpreters(config)
    return measure_with(config, fresh=fresh), measure_with(config, capped=False, fresh=fresh)


def round_interpreters(config: AdvisorConfig) -> Union[bool, str]:
    """How a round's runs start (`run_measurement`'s `fresh`): forked from the session's template,
    forked from a new interpreter of the round's own (`advisor.harness.templates`: each run the first in
    its process, each round its own draw, one interpreter's imports a round; a script's runs start a new
    interpreter each, started ahead: `launch.ready_interpreter`), or (`measure.keep_interpreters`) new
    ones for the first rounds, taken in turn after (`advisor.harness.kept`)."""
    if not config.measure.fresh_rounds:
        return False
    return "kept" if config.measure.keep_interpreters else "template"


@dataclass(frozen=True)
class Reference:
    """What the baseline's trial says of the session's judgement: the run every candidate must
    reproduce, whose it is in words, whether the baseline fits at all (a memory fix is then
    judged on fitting), and whether the ideal is measured beside each verification round."""

    base_run: Measurement  # the baseline's trial (the diagnosis's full run when there was none)
    uncapped: Optional[Measurement]  # the baseline run once without the constraint it broke
    run: Optional[Measurement]  # the run whose results the candidates reproduce (None: nothing fitted)
    note: str  # whose results those are, in words
    memory_fix: bool  # the baseline does not fit its budget
    with_ideal: bool  # input-bound: the ideal (synthetic batches) is measured beside each round


@dataclass(frozen=True)
class Session:
    """Everything a stage needs to know of its session, read-only."""

    config: AdvisorConfig
    facts: SessionFacts
    diagnoses: list[Diagnosis] = field(default_factory=list)
    measure: Optional[Callable[..., Measurement]] = None  # a trial or candidate: held to the constraints
    measure_reference: Optional[Callable[[dict], Measurement]] = None  # the job as the user runs it: uncapped
    progress: Progress = lambda line: None
    hooks: Hooks = Hooks()
    started: float = 0.0
    reference: Optional[Reference] = None  # set once the search is done (`gate.with_reference`)
    envelopes: dict = field(default_factory=dict, compare=False, repr=False)  # measured once per reference plan
    # the rounds whose ratios are reported (verification, leave-one-out): a new interpreter each run
    round_measure: Optional[Callable[..., Measurement]] = None
    round_reference: Optional[Callable[[dict], Measurement]] = None
    study: Optional[object] = field(default=None, compare=False, repr=False)  # keeps verification rounds as they finish

    def measured_envelope(self) -> Optional[Envelope]:
        """The rounding envelope measured for the reference's plan (the baseline's during the
        search), if any candidate needed it."""
        plan = self.reference.run.plan if self.reference is not None and self.reference.run is not None else self.baseline
        return self.envelopes.get(plan_key(plan))

    def __post_init__(self) -> None:
        if self.measure is None:
            object.__setattr__(self, "measure", measure_with(self.config))
        if self.measure_reference is None:
            object.__setattr__(self, "measure_reference", measure_with(self.config, capped=False))
        if self.round_measure is None or self.round_reference is None:
            capped, uncapped = round_measures(self.config)
            object.__setattr__(self, "round_measure", self.round_measure or capped)
            object.__setattr__(self, "round_reference", self.round_reference or uncapped)

    @property
    def baseline(self) -> dict:
        return self.facts.baseline

    @property
    def context(self) -> Context:
        return self.facts.context
