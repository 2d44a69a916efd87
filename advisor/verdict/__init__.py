"""How a speedup is judged real, in one place: the statistics of paired ratios (`statistics`),
the sequential design that says when to look and at what level (`design`), and the judge whose
`Verdict` carries its `Status` and the confidence its interval was drawn at (`judge`).

Numerics (whether results are unchanged) and the interleaved rounds themselves are
`advisor.verify`'s; this package decides what the rounds support.
"""

from advisor.verdict.design import (
    FIRST_LOOK,
    FUTILE_UNDER,
    chance_to_settle,
    level_stopping_at,
    look_confidence,
    look_schedule,
    reported_confidence,
    rounds_to_pin,
    settled,
)
from advisor.verdict.judge import BUSY_REASON, Status, Verdict, astride, judge, levels_of, was_busy
from advisor.verdict.statistics import PLAIN_LEVEL, chance_words, half_width, interval_words, level_words, paired_interval

__all__ = ["BUSY_REASON", "FIRST_LOOK", "FUTILE_UNDER", "PLAIN_LEVEL", "Status", "Verdict", "astride", "chance_to_settle",
           "chance_words", "half_width", "interval_words", "judge", "level_stopping_at", "level_words", "levels_of", "look_confidence",
           "look_schedule", "paired_interval", "reported_confidence", "rounds_to_pin", "settled", "was_busy"]
