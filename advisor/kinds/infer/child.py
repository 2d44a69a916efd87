"""The infer kind's child side: the model and requests resolved, then replayed by its loop (`loop`)."""

from __future__ import annotations

from typing import Any, Callable

from advisor.config import AdvisorConfig
from advisor.kinds.train.child import check_model
from advisor.workload import call_user, resolve_callable


def load_infer_job(config: AdvisorConfig) -> Callable[[], Any]:
    """Resolves an `infer` workload's references; returns the builder of its `InferJob`."""
    spec = config.workload
    model_fn = resolve_callable(spec.model, config.root, "workload.model")
    requests_fn = resolve_callable(spec.requests, config.root, "workload.requests")
    handler = resolve_callable(spec.handler, config.root, "workload.handler") if spec.handler else None

    def build():
        from advisor.kinds.infer.loop import InferJob

        model = check_model(call_user(model_fn, spec.model_args, "workload.model"), "workload.model")
        return InferJob(model, call_user(requests_fn, spec.requests_args, "workload.requests"), handler)

    return build


def run_infer(config: AdvisorConfig, spec: dict) -> dict:
    from advisor.kinds.infer import loop

    return loop.run(config, load_infer_job(config), spec["plan"], spec["mode"], spec.get("output"), spec.get("progress"))
