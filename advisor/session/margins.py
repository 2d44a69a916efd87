"""The session's margins: how much faster one noisy trial must run than what it is compared
with before it counts, each with the measurement it was chosen on. Constants only."""

from __future__ import annotations

MEMORY_TIE_SAVING = 0.10  # a lean fix leads an indistinguishable faster one when it saves this share

# A single trial is one noisy draw, and the best of several draws runs high: on the quickstart,
# trials of plans that all saturate the input ranged 1,400-1,800 samples/s in one session, and
# one trial ran 1.3x over its own verification rounds. So a trial must beat what it is
# compared with by this margin to count as clearly faster: over the bar, it is verified at once
# (the search goes on); over a verified fix, it is worth verifying too.
EARLY_MARGIN = 1.2

# A plan under this share of the baseline's trial lost past a trial's noise, and the plans that
# add to it are ruled out unmeasured (`search.dominance`): pruning's share (a trial 1.4x behind).
# Not 1 / EARLY_MARGIN: the baseline's trial is one draw too, and on a script whose rate moves
# +-15% run to run (experiments.noisy_answer) a baseline trial that ran high put a plan of the
# allocator at 0.81x, ruling out three plans that add to it, one of them 1.12x in another session.
# A plan that changes nothing reads 0.74x at worst there.
RULE_OUT_UNDER = 0.7

# A candidate that clears EARLY_MARGIN over the verified fix in its trial is run once more right
# after that fix (two runs) before its verification (three to five rounds): the trial was picked
# for running high, the pair is a fresh draw. Under this ratio it most likely ranks under the
# fix, and is not verified.
CONFIRM_MARGIN = 1.1

# The fastest candidate left needs less than EARLY_MARGIN over the verified fix: this much in its
# trial earns it that second draw beside the fix. A fix stacked on the first one often adds
# 10-20% (serve_encoder: inference_mode verified early; bf16 and compile on top of it ran 1.14x
# faster in their trial and went unverified under EARLY_MARGIN, 0.63x of the grid's best).
SECOND_LOOK_MARGIN = 1.1

# The recipes that beat the baseline's trial by min_speedup are stacked; then, in a second trial,
# those whose own trial ran at least this share of it: one trial each cannot tell a small loss
# from a gain its noise hid (serve_encoder, bench of 2026-11-24: the baseline's trial ran at
# 187/s, 174/s in later rounds; bf16 and inference mode alone read 0.93x and 0.92x of it, nothing
# was verified, and the two together ran 1.71x). Not the wider stack alone: in the next bench run
# it took in compile and quantization too (0.98x, 0.93x alone) and ran slower than bf16 with
# inference mode, the two that had beaten the baseline.
STACK_FLOOR = 0.9
