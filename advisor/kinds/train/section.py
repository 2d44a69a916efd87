"""`workload: {kind: train}`: a training job built from the user's functions."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Optional

from advisor.config import Invalid, Ref, WorkloadSection, above_zero, callable_ref, checked, non_negative, positive


@dataclass(frozen=True)
class DataLoaderConfig:
    num_workers: int = checked(non_negative, default=0)  # the DataLoader's worker processes, as you run it today
    prefetch_factor: Optional[int] = checked(positive, default=None)  # batches each worker loads ahead; None: torch's 2
    pin_memory: bool = False  # page-locked batches (speeds copies to a GPU)
    persistent_workers: bool = False  # workers kept from one epoch to the next
    shuffle: bool = True  # samples in a random order each epoch


_host_port = (lambda v: bool(re.match(r"^[\w.\-]+:\d{1,5}$", v)) and 0 < int(v.rsplit(":", 1)[1]) < 65536,
              "host:port (the address every node reaches on node 0, e.g. 10.0.0.1:29511)")


@dataclass(frozen=True)
class DistributedConfig:
    """Data-parallel training across processes and machines: each node's ranks started by
    torchrun behind the node's `launch` prefix, the model wrapped in DistributedDataParallel."""

    nodes: int = checked(positive, default=1)  # machines
    ranks_per_node: int = checked(positive, default=1)  # processes on each machine (one per GPU, with CUDA)
    backend: Literal["gloo", "nccl"] = "gloo"  # torch.distributed's: gloo on CPUs, nccl between GPUs
    rendezvous: Optional[str] = checked(_host_port, default=None)  # None: 127.0.0.1 and a free port
    launch: Optional[str] = None  # a command prefix per node, "{node}" replaced by its index: ssh, srun, ip netns exec
    # the user's DistributedDataParallel(...) settings: the baseline's
    find_unused_parameters: bool = False  # your DistributedDataParallel(...) setting: the baseline's
    bucket_cap_mb: float = checked(above_zero, default=25.0)  # your DistributedDataParallel(...) setting: the baseline's

    def __post_init__(self):
        if self.nodes > 1 and self.rendezvous is None:
            raise Invalid("workload.distributed.rendezvous", f"missing; {self.nodes} nodes need an address on node 0 that "
                                                             "every node reaches (host:port)")
        if self.nodes > 1 and not self.launch:
            raise Invalid("workload.distributed.launch", f"missing; {self.nodes} nodes need a command prefix that starts "
                                                         "a process on node {node} (ssh node{node}, srun -N1 ..., ip netns exec ...)")

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node


@dataclass(frozen=True)
class TrainWorkload(WorkloadSection):
    """A training job: the loop the user runs today."""

    model: Ref = checked(callable_ref)  # -> the nn.Module you train
    dataset: Ref = checked(callable_ref)  # a map-style Dataset, or a DataLoader whose sampler and collate_fn are kept
    kind: Literal["train"] = "train"  # a training job built from your functions
    RECIPES: ClassVar[str] = "train"  # the recipes' `kinds` that apply (`distributed` with that section)
    model_args: dict = field(default_factory=dict)  # keyword arguments for model
    dataset_args: dict = field(default_factory=dict)  # keyword arguments for dataset
    loss: Optional[Ref] = checked(callable_ref, default=None)  # loss(output, batch) -> scalar; None: cross-entropy on batch[1]
    collate: Optional[Ref] = checked(callable_ref, default=None)  # collate_fn for every DataLoader advisor builds
    step: Optional[Ref] = checked(callable_ref, default=None)  # train_step(model, batch, optimizer) -> loss
    # {name: a torch.optim class or a dotted path to any optimizer class, **options}, or build_optimizer(model)
    optimizer: Any = field(default_factory=lambda: {"name": "SGD", "lr": 0.01})
    batch_size: int = checked(positive, default=32)  # samples a step
    dataloader: DataLoaderConfig = field(default_factory=DataLoaderConfig)  # your DataLoader's settings: the baseline's
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA where there is a GPU
    threads: Optional[int] = checked(positive, default=None)  # torch.set_num_threads, if your job sets it
    distributed: Optional[DistributedConfig] = None  # data-parallel across processes and machines

    def __post_init__(self):
        _check_optimizer(self.optimizer)

    def run_child(self, config, spec: dict) -> dict:
        from advisor.kinds.train.child import run_train

        return run_train(config, spec)

    def runs_as(self) -> str:
        return "distributed" if self.distributed is not None else "train"

    def recipe_family(self) -> str:
        return self.runs_as()  # the data-parallel recipes join the training ones

    def load_job(self, config):
        """The builder of the job, for one rank of a data-parallel run (`advisor.harness.rank`)."""
        from advisor.kinds.train.child import load_train_job

        return load_train_job(config)


def _check_optimizer(optimizer: Any) -> None:
    if isinstance(optimizer, dict):
        if not isinstance(optimizer.get("name"), str):
            raise Invalid("workload.optimizer.name", "missing; name a torch.optim class (e.g. name: SGD) or give a "
                                                     "dotted path to one (e.g. name: torch.optim.AdamW)")
        return
    if not callable_ref[0](optimizer):
        raise Invalid("workload.optimizer", f"expected a mapping with a name, or a builder "
                                            f"('file.py:build_optimizer'), got {optimizer!r}")
