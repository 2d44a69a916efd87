"""Verification rounds kept in the study as they finish. A session stopped mid-verification
(Ctrl-C, a lost machine) goes on from the next round when it resumes, on whichever machine
resumes it: the rounds live where the trials do."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Optional

from advisor.harness.lifetime import interrupts_held
from advisor.measure import Measurement
from advisor.plan import plan_key
from advisor.verify import Rounds

ROUND_ATTR = "verification_round"  # study attribute `verification_round:<arms>:<index>`: each arm's run


def arms_key(reference_plan: dict, arms: dict[str, dict]) -> str:
    """Which verification the rounds belong to: the reference's plan and each arm's name and plan.
    Another set of candidates, or another reference, starts its rounds afresh."""
    described = [plan_key(reference_plan), sorted((name, plan_key(plan)) for name, plan in arms.items())]
    return hashlib.sha256(json.dumps(described).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class KeptRounds:
    """The study's kept rounds of one verification, read once and added to as rounds finish."""

    study: Any  # an optuna Study
    key: str

    def earlier(self, reference: str, names: list[str]) -> Optional[Rounds]:
        """The rounds finished before, in order (`advisor.verify.interleave`). A round is stored
        whole, so an arm it lacks had ended there (the ideal past its first rounds, or a candidate
        the verification ended: `Stopping`): read as ended for the rounds after, its runs shorter
        than the reference's. The read stops at a round without the reference or with an arm back
        after it had ended."""
        attrs, found, ended = self.study.user_attrs, [], set()
        while (runs := attrs.get(f"{ROUND_ATTR}:{self.key}:{len(found)}")) is not None:
            if reference not in runs or any(name in runs for name in ended):
                break
            ended |= {name for name in names if name not in runs}
            found.append({name: Measurement.from_dict(run) for name, run in runs.items()})
        if not found:
            return None
        return Rounds([r[reference] for r in found], {name: [r[name] for r in found if name in r] for name in names})

    def keeper(self) -> Callable[[int, dict[str, Measurement]], None]:
        def keep(index: int, runs: dict[str, Measurement]) -> None:
            with interrupts_held():  # a round is stored whole: Ctrl-C waits for it
                self.study.set_user_attr(f"{ROUND_ATTR}:{self.key}:{index}",
                                         {name: run.to_dict() for name, run in runs.items()})

        return keep
