"""Does how the plain loop is written move a claim's reproduction? advisor's measurement, the plain
loop as most users write it (zero_grad, forward, backward, step) and the plain loop run through
its accumulation code at one micro-batch (split views, scaled and summed losses: small tensors
made each step), each for the baseline and a plan, in the same rounds.

    python -m experiments.loop_styles CONFIG PLAN_JSON [--rounds 6]

Prints each loop's speedup and page faults a step. On a job whose step frees its gradients at
the heap's top, where glibc then places a step's small blocks decides whether those gradients go
back to the kernel and are faulted in again next step: a loop's few small tensors tip it, and
with it an allocator fix's gain (`python -m experiments.heap_state` shows the faults alone).
"""

import json
import statistics
import tempfile
from pathlib import Path

from advisor.config import load_config
from advisor.kinds import baseline_plan
from advisor.session import round_measures
from advisor.verify import paired_interval
from experiments.agreement import claim_arguments, rotated_rounds
from experiments.reproduce import plain_result

LOOPS = {"plain": (), "split": ("--split-always",)}


def main() -> None:
    args = claim_arguments(__doc__, 6)
    config_path = args.config.resolve()
    config, plan = load_config(config_path), json.loads(args.plan.read_text())
    measure, measure_reference = round_measures(config)
    faults: dict = {}

    def kept(name: tuple[str, str], rate: float, per_step: float) -> float:
        faults.setdefault(name, []).append(per_step)
        return rate

    def advisor(what: str, knobs: dict, run) -> float:
        measured = run({**baseline_plan(config), **knobs})
        return kept(("advisor", what), measured.samples_per_s, measured.page_faults_per_step)

    def plain(loop: str, what: str, plan_file: Path) -> float:
        result = plain_result(config_path, plan_file, LOOPS[loop])
        return kept((loop, what), result["samples_per_s"], result["page_faults_per_step"])

    with tempfile.TemporaryDirectory() as folder:
        files = {"baseline": Path(folder) / "baseline.json", "plan": Path(folder) / "plan.json"}
        files["baseline"].write_text("{}")
        files["plan"].write_text(json.dumps(plan))
        runs = {("advisor", "baseline"): lambda: advisor("baseline", {}, measure_reference),
                ("advisor", "plan"): lambda: advisor("plan", plan, measure)}
        for loop in LOOPS:
            for what in files:
                runs[(loop, what)] = lambda loop=loop, what=what: plain(loop, what, files[what])
        rates = rotated_rounds(runs, args.rounds)
    for loop in ("advisor", *LOOPS):
        mid, low, high = paired_interval([p / b for p, b in zip(rates[(loop, "plan")], rates[(loop, "baseline")])])
        seen = {what: faults[(loop, what)] for what in ("baseline", "plan")}
        print(f"{loop:<8} speedup {mid:.2f}x (95% {low:.2f}-{high:.2f}x); page faults a step: "
              + "; ".join(f"{what} {statistics.fmean(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})" for what, v in seen.items()))


if __name__ == "__main__":
    main()
