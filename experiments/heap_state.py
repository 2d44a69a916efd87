"""Does the C allocator's state differ between advisor's measurement and a plain loop, and with
how the plain loop is written? Each loop's rate, speedup and minor page faults a step, for the
baseline and a plan, in the same rounds: advisor's measurement; the plain loop as most users
write it (zero_grad, forward, backward, step); and the plain loop run through its accumulation
code at one micro-batch (`--split-always`: split views, scaled and summed losses, small tensors
made each step).

    python -m experiments.heap_state CONFIG PLAN_JSON [--rounds 6]

A training step that frees its gradients hands them back to the kernel when glibc's trim
threshold (moved by what the process freed before) lies under what sits free at the heap's top;
the next step faults every page in again. Whether they sit together at the top is decided by
where glibc placed the step's small blocks: a loop's few small tensors tip it, and with it an
allocator fix's gain (its fixed thresholds end the faults).
"""

import json
import statistics
import tempfile
from pathlib import Path

from advisor.kinds import baseline_plan, load_config
from advisor.session import round_measures
from advisor.verdict import paired_interval
from experiments.agreement import claim_arguments, per_round, rotated_rounds
from experiments.reproduce import plain_result

PLAIN_LOOPS = {"plain": (), "split": ("--split-always",)}  # name: the plain loop's flags


def spread(values: list[float]) -> str:
    """A mean and its range: '8,259 (6,898-8,848)'."""
    return f"{statistics.fmean(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main() -> None:
    args = claim_arguments(__doc__, 6)
    config_path = args.config.resolve()
    config, plan = load_config(config_path), json.loads(args.plan.read_text())
    measure, measure_reference = round_measures(config)
    faults: dict = {}

    def kept(name: tuple[str, str], rate: float, per_step: float) -> float:
        faults.setdefault(name, []).append(per_step)
        return rate

    def advisor(what: str, run) -> float:
        measured = run({**baseline_plan(config), **(plan if what == "plan" else {})})
        return kept(("advisor", what), measured.samples_per_s, measured.page_faults_per_step)

    def plain(loop: str, what: str, plan_file: Path) -> float:
        result = plain_result(config_path, plan_file, PLAIN_LOOPS[loop])
        return kept((loop, what), result["samples_per_s"], result["page_faults_per_step"])

    with tempfile.TemporaryDirectory() as folder:
        files = {"baseline": Path(folder) / "baseline.json", "plan": Path(folder) / "plan.json"}
        files["baseline"].write_text("{}")
        files["plan"].write_text(json.dumps(plan))
        runs = {("advisor", "baseline"): lambda: advisor("baseline", measure_reference),
                ("advisor", "plan"): lambda: advisor("plan", measure)}
        runs.update({(loop, what): (lambda loop=loop, what=what: plain(loop, what, files[what]))
                     for loop in PLAIN_LOOPS for what in files})
        rates = rotated_rounds(runs, args.rounds)
    for loop in ("advisor", *PLAIN_LOOPS):
        mid, low, high = paired_interval([ratio for ratio in per_round(rates, loop) if ratio is not None])
        print(f"{loop:<8} speedup {mid:.2f}x (95% {low:.2f}-{high:.2f}x); page faults a step: "
              f"baseline {spread(faults[(loop, 'baseline')])}; plan {spread(faults[(loop, 'plan')])}")
    for what in ("baseline", "plan"):
        mid, low, high = paired_interval([a / p for a, p in zip(rates[("advisor", what)], rates[("plain", what)])])
        print(f"advisor / plain, {what}: {mid:.3f}x (95% {low:.3f}-{high:.3f}x)")


if __name__ == "__main__":
    main()
