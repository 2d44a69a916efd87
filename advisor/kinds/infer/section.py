"""`workload: {kind: infer}`: a model served request by request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal, Optional

from advisor.config import Ref, WorkloadSection, callable_ref, checked, positive


@dataclass(frozen=True)
class InferWorkload(WorkloadSection):
    """A model served request by request: the latency a client sees, under a load pattern."""

    model: Ref = checked(callable_ref)  # -> nn.Module (advisor puts it in eval mode)
    requests: Ref = checked(callable_ref)  # -> a list of requests, each one call's input (tensor, tuple or dict)
    kind: Literal["infer"] = "infer"  # a model served request by request
    RECIPES: ClassVar[str] = "infer"
    SERVED: ClassVar[bool] = True  # judged by the latency its clients see
    model_args: dict = field(default_factory=dict)  # keyword arguments for model
    requests_args: dict = field(default_factory=dict)  # keyword arguments for requests
    handler: Optional[Ref] = checked(callable_ref, default=None)  # handle(model, request) -> output: your pre/post-processing
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA where there is a GPU
    threads: Optional[int] = checked(positive, default=None)  # torch.set_num_threads, if your service sets it

    def run_child(self, config, spec: dict) -> dict:
        from advisor.kinds.infer.child import run_infer

        return run_infer(config, spec)
