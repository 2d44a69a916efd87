"""The optimize session as a pipeline of stages, one module each:

  planning      evidence -> diagnoses -> recipes, search space, first trials (`SessionFacts`)
  trials        the Optuna study's trials, under the search `policies`
  gate          whose results candidates reproduce; which trials pass the numerics gate
  verification  interleaved re-measurement, paired intervals, the ledger of verdicts
  ranking       verified first, each recipe's share, #1 without what slows it
  payload       `recommendations.json`

`optimize` (in `optimize.py`) reads top to bottom. Every stage takes one frozen `Session`
bundle; the session's tuned margins live in `margins`, its result types in `results`.
"""

from advisor.session.bundle import Reference, Session, measure_with, round_measures
from advisor.session.optimize import conclude, optimize
from advisor.session.payload import session_payload
from advisor.session.planning import SessionFacts, plan_session
from advisor.session.results import Hooks, Recommendation, Rejection, SessionResult
from advisor.session.trials import join_study

__all__ = [
    "Hooks", "Recommendation", "Reference", "Rejection", "Session", "SessionFacts", "SessionResult", "conclude",
    "round_measures", "join_study", "measure_with", "optimize", "plan_session", "session_payload",
]
