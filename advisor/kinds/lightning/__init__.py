"""`kind: lightning`: a LightningModule trained on its LightningDataModule's train_dataloader().

advisor runs the module's own `training_step` and `configure_optimizers` (the first optimizer,
its schedulers stepped as Lightning steps them) in its measured loop, so everything the train
kind measures, diagnoses and verifies applies. The loader's dataset, sampler and collate
function are kept; the plan changes only its batch size and worker settings, whose baseline is
what `train_dataloader()` returned. `lightning` is an optional extra (`verified-advisor[lightning]`).
"""

from __future__ import annotations

from typing import Any, Optional

from advisor.config import AdvisorConfig
from advisor.kinds.train import TAKEN_FROM_THE_JOB, TrainKind
from advisor.recipes import settings_off


class LightningKind(TrainKind):
    name = "lightning"
    packages: tuple[str, ...] = ("lightning",)
    preload = ("lightning",)  # 4-5 s a child to import, once in the fork server (torch._dynamo with it)

    def baseline_plan(self, config: AdvisorConfig, seen: Optional[dict] = None) -> dict:
        loader = (seen or {}).get("loader", {})  # None before the first run: the loader's own settings
        return {
            "dataloader.num_workers": loader.get("dataloader.num_workers"),
            "dataloader.prefetch_factor": loader.get("dataloader.prefetch_factor"),
            "dataloader.pin_memory": loader.get("dataloader.pin_memory"),
            "dataloader.persistent_workers": loader.get("dataloader.persistent_workers"),
            "threads.intra_op": config.workload.threads,
            **settings_off(self.off_family, TAKEN_FROM_THE_JOB),
            "batch_size": loader.get("batch_size"),
        }

    def step_of(self, config: AdvisorConfig) -> str:
        return ""  # advisor runs training_step, backward and the optimizer step, as Lightning's loop does

    def sources(self, config: AdvisorConfig) -> dict[str, Any]:
        return {"module": config.workload.module, "datamodule": config.workload.datamodule}


KIND = LightningKind()
