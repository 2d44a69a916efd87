"""What the study holds: the names of its attributes and a trial's, and a finished trial read
back as `TrialResult`."""

from __future__ import annotations

from dataclasses import dataclass

from optuna.trial import FrozenTrial, TrialState

from advisor.measure import Measurement

MEASUREMENT_ATTR = "measurement"
PLAN_ATTR = "plan"
CONSTRAINT = "infeasible"  # Optuna constraint: > 0 means infeasible, and TPE learns to avoid it


@dataclass(frozen=True)
class TrialResult:
    """A finished trial, as the rest of advisor sees it."""

    number: int
    plan: dict
    measurement: Measurement
    feasible: bool

    @property
    def samples_per_s(self) -> float:
        return self.measurement.samples_per_s if self.feasible else 0.0


def is_feasible_trial(trial: FrozenTrial) -> bool:
    return all(value <= 0 for value in trial.constraints.values())


COUNTED_STATES = (TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING, TrialState.PRUNED)
SKIPPED_ATTR = "skipped"  # why a trial was not run: over the budget (a race), or a plan already measured


def counts(trial: FrozenTrial, retried_numbers: frozenset = frozenset()) -> bool:
    """Whether a trial counts against the budget: finished or under way, neither interrupted nor
    failed with its process and retried (it is run again), nor skipped."""
    return (trial.state in COUNTED_STATES and not trial.user_attrs.get(INTERRUPTED_ATTR)
            and not trial.user_attrs.get(SKIPPED_ATTR) and trial.number not in retried_numbers)


RECORDED_ATTR = "recorded"  # a trial measured outside the search, and where
INTERRUPTED_ATTR = "interrupted"
REQUEUED_ATTR = "requeued_trials"
SPACE_ATTR = "space"
WORKER_ATTR = "worker"  # machine:pid of the process that ran the trial (lifetime.owner)
HEARTBEAT_ATTR = "heartbeat"  # when the running trial's process last said it was alive
WINDOW_ATTR = "window"  # a watched trial's timed window: {"of": its steps, "best_case": whether its values are already bounds}
RULED_OUT_ATTR = "ruled_out_by"  # a skipped trial's plan adds to a clearly slower trial's: {"trial", "changes", "ratio"} (`dominance`)
AT_MOST_ATTR = "at_most"  # a pruned trial's rate, at most: what it could still reach over what that reads at worst
UNRUN_ATTR = "unrun_s"  # a pruned trial's timed window left unrun, in seconds at its pace so far: the time pruning saved
