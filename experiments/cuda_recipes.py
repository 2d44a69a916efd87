"""Each recipe's textbook setting run for real on the device the configs pick (CUDA where there
is one), beside the baseline: whether it runs, its rate, and whether its results match.

    python -m experiments.cuda_recipes [--steps 20]

The CPU paths run in the test suite; this covers what only a GPU runs (float16 with its loss
scaler, pinned memory with asynchronous copies, compile and autocast on CUDA). Its lines are the
same on two versions of advisor that apply recipes the same way.
"""

import argparse
import dataclasses
from pathlib import Path

from advisor.kinds import kind_of, load_config
from experiments import config_path

ROOT = Path(__file__).resolve().parent.parent
PLANS = {
    "quickstart": {
        "amp bfloat16": {"amp.dtype": "bfloat16"},
        "amp float16": {"amp.dtype": "float16"},
        "workers, pinned": {"dataloader.num_workers": 2, "dataloader.pin_memory": True,
                            "dataloader.persistent_workers": True},
        "micro-batches": {"grad_accumulation.micro_batches": 4},
        "compile": {"compile.mode": "default"},
    },
    "serve_encoder": {
        "inference mode": {"inference_mode.enabled": True},
        "inference mode, bfloat16": {"inference_mode.enabled": True, "amp.dtype": "bfloat16"},
        "compile": {"compile.mode": "default"},
        "warm-up": {"warmup.requests": 8},
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    for name, plans in PLANS.items():
        config = load_config(config_path(name))
        config = dataclasses.replace(config, measure=dataclasses.replace(config.measure, steps=args.steps))
        kind = kind_of(config.kind)
        baseline = kind.baseline_plan(config)
        measure = kind.measure(config, True)
        base = measure(baseline)
        print(f"{name} baseline: {base.status} {base.samples_per_s:,.1f}/s on {base.device} {base.reason}")
        for label, changes in plans.items():
            run = measure({**baseline, **changes})
            same = kind.compare(run, base, "tolerance", config) if run.ok and base.ok else None
            numerics = "-" if same is None else f"{'same' if same.passed else 'differs'} ({same.max_rel_diff:.2e})"
            print(f"{name} {label}: {run.status} {run.samples_per_s / base.samples_per_s if base.ok else 0:.2f}x, "
                  f"results {numerics} {run.reason[:160]}")


if __name__ == "__main__":
    main()
