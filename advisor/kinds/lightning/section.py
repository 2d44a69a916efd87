"""`workload: {kind: lightning}`: a LightningModule and its LightningDataModule."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal, Optional

from advisor.config import Ref, WorkloadSection, callable_ref, checked, positive


@dataclass(frozen=True)
class LightningWorkload(WorkloadSection):
    """A LightningModule and its LightningDataModule: advisor runs training_step and
    configure_optimizers on batches from train_dataloader()."""

    module: Ref = checked(callable_ref)  # a LightningModule class or builder
    datamodule: Ref = checked(callable_ref)  # a LightningDataModule class or builder
    kind: Literal["lightning"] = "lightning"  # a LightningModule trained on its LightningDataModule
    RECIPES: ClassVar[str] = "train"
    module_args: dict = field(default_factory=dict)  # keyword arguments for module
    datamodule_args: dict = field(default_factory=dict)  # keyword arguments for datamodule
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA where there is a GPU
    threads: Optional[int] = checked(positive, default=None)  # torch.set_num_threads, if your job sets it

    def run_child(self, config, spec: dict) -> dict:
        from advisor.kinds.lightning.child import run_lightning

        return run_lightning(config, spec)
