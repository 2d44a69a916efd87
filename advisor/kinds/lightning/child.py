"""The lightning kind's child side: the LightningModule's own training_step and configure_optimizers, run by the training loop."""

from __future__ import annotations

import itertools
from typing import Any, Callable, Mapping, Optional

from advisor.config import AdvisorConfig
from advisor.errors import UserError
from advisor.kinds.train.child import unpack_loader
from advisor.workload import call_user, resolve_callable

MISSING = "workload.kind: 'lightning' needs the lightning package; install it with pip install 'verified-advisor[lightning]'"


def lightning_classes() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """LightningModule and LightningDataModule from whichever of the two packages is installed."""
    modules, datamodules = [], []
    for package in ("lightning.pytorch", "pytorch_lightning"):
        try:
            imported = __import__(package, fromlist=["LightningModule"])
        except ImportError:
            continue
        modules.append(imported.LightningModule)
        datamodules.append(imported.LightningDataModule)
    if not modules:
        raise UserError(MISSING)
    return tuple(modules), tuple(datamodules)


def load_lightning_job(config: AdvisorConfig) -> Callable[[], Any]:
    spec = config.workload
    module_types, datamodule_types = lightning_classes()
    module_fn = resolve_callable(spec.module, config.root, "workload.module")
    datamodule_fn = resolve_callable(spec.datamodule, config.root, "workload.datamodule")

    def build():
        import warnings

        from torch.utils.data import DataLoader

        from advisor.harness.train import TrainJob

        warnings.filterwarnings("ignore", message=".*self.log.*")  # no Trainer to log to: its metrics are not ours
        module = call_user(module_fn, spec.module_args, "workload.module")
        if not isinstance(module, module_types):
            raise UserError(f"workload.module: the builder returned {type(module).__name__}; return a LightningModule")
        if any(type(module).training_step is base.training_step for base in module_types):
            raise UserError(f"workload.module: {type(module).__name__} has no training_step; define "
                            "training_step(self, batch, batch_idx) returning the loss")
        if not module.automatic_optimization:
            raise UserError(f"workload.module: {type(module).__name__} uses manual optimization, which needs a Trainer; "
                            "advisor runs modules with automatic optimization")
        datamodule = call_user(datamodule_fn, spec.datamodule_args, "workload.datamodule")
        if not isinstance(datamodule, datamodule_types):
            raise UserError(f"workload.datamodule: the builder returned {type(datamodule).__name__}; "
                            "return a LightningDataModule")
        datamodule.prepare_data()
        if any(type(datamodule).train_dataloader is base.train_dataloader for base in datamodule_types):
            raise UserError(f"workload.datamodule: {type(datamodule).__name__} has no train_dataloader; define "
                            "train_dataloader(self) returning the DataLoader it trains on")
        datamodule.setup("fit")
        loader = datamodule.train_dataloader()
        if not isinstance(loader, DataLoader):
            raise UserError(f"workload.datamodule: train_dataloader() returned {type(loader).__name__}; return a DataLoader")
        dataset, sampler, collate, shuffle = unpack_loader(loader, True)
        settings = {
            "batch_size": loader.batch_size,
            "dataloader.num_workers": loader.num_workers,
            "dataloader.prefetch_factor": loader.prefetch_factor,
            "dataloader.pin_memory": loader.pin_memory,
            "dataloader.persistent_workers": loader.persistent_workers,
        }
        return TrainJob(
            model=module, dataset=dataset, make_optimizer=lambda model: configured_optimizer(model, len(loader)),
            forward=training_step(), collate=collate, sampler=sampler, shuffle=shuffle, loader=settings,
            step_key="workload.module", compile_in_place=True,
        )

    return build


def training_step() -> Callable:
    """The module's training_step as advisor's forward: batch -> loss, batch indices counting up."""
    counter = itertools.count()

    def forward(module, batch: Any):
        output = module.training_step(batch, next(counter))
        loss = output.get("loss") if isinstance(output, Mapping) else output
        if loss is None:
            raise UserError(f"workload.module: {type(module).__name__}.training_step returned {type(output).__name__} "
                            "with no loss; return the loss tensor (or a dict with 'loss')")
        return loss

    return forward


def configured_optimizer(module, steps_per_epoch: int) -> tuple[Any, Callable[[], None]]:
    """configure_optimizers() read as Lightning reads it: the first optimizer, and a function that
    steps its schedulers after each optimizer step (`interval: step`) or each epoch's last."""
    optimizers, schedulers = split_configuration(module.configure_optimizers())
    if not optimizers:
        raise UserError(f"workload.module: {type(module).__name__}.configure_optimizers() returned no optimizer")
    optimizer = optimizers[0]
    own = [s for s in schedulers if getattr(s["scheduler"], "optimizer", optimizer) is optimizer]
    steps = itertools.count(1)

    def after_step() -> None:
        step = next(steps)
        for entry in own:
            every = entry.get("frequency", 1) * (1 if entry.get("interval", "epoch") == "step" else steps_per_epoch)
            if step % every == 0 and entry.get("monitor") is None:  # a monitored scheduler needs logged metrics
                entry["scheduler"].step()

    return optimizer, after_step


def split_configuration(conf: Any) -> tuple[list, list[dict]]:
    """Optimizers and scheduler entries from any of configure_optimizers()'s return shapes."""
    if conf is None:
        return [], []
    if isinstance(conf, Mapping):
        scheduler = conf.get("lr_scheduler")
        return [conf["optimizer"]], [scheduler_entry(scheduler, conf.get("monitor"))] if scheduler is not None else []
    if isinstance(conf, (list, tuple)):
        if len(conf) == 2 and isinstance(conf[0], (list, tuple)):  # ([optimizers], [schedulers])
            return list(conf[0]), [scheduler_entry(s) for s in conf[1]]
        optimizers, schedulers = [], []
        for item in conf:
            more_optimizers, more_schedulers = split_configuration(item)
            optimizers += more_optimizers
            schedulers += more_schedulers
        return optimizers, schedulers
    return [conf], []


def scheduler_entry(scheduler: Any, monitor: Optional[str] = None) -> dict:
    if isinstance(scheduler, Mapping):
        return {"interval": "epoch", "frequency": 1, **scheduler}
    return {"scheduler": scheduler, "interval": "epoch", "frequency": 1, "monitor": monitor}


def run_lightning(config: AdvisorConfig, spec: dict) -> dict:
    from advisor.harness import train

    return train.run(config, load_lightning_job(config), spec["plan"], spec["mode"], spec["steps"], spec.get("progress"),
                     epoch_end_s=spec.get("epoch_end_s"))
