"""Resolves a config's `module:callable` references into the user's own code.

References resolve relative to the config's folder: `pkg.mod:fn` is imported with that folder
first on `sys.path`; `path/to/file.py:fn` names a file, whose folder is put on `sys.path` so
that DataLoader workers started by spawn can import it again. A config that names code runs
that code, as a Makefile does.
"""

from __future__ import annotations

import importlib
import itertools
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Optional

from advisor.config import CALLABLE_PATTERN, AdvisorConfig
from advisor.errors import UserError


def resolve_callable(ref: Any, root: Path, key_path: str) -> Callable:
    """Imports `module:callable` (or `file.py:callable`) relative to `root`; a callable (given
    through the Python API) is its own reference."""
    if callable(ref):
        return ref
    match = CALLABLE_PATTERN.match(ref)
    if not match:
        raise UserError(f"{key_path}: {ref!r} is not 'module:callable' or 'path/to/file.py:callable'")
    module_name, attr = match["module"], match["attr"]
    if match["file"]:
        file = (root / f"{module_name}.py").resolve()
        if not file.is_file():
            raise UserError(f"{key_path}: file {file} not found; paths resolve relative to {root}")
        search_path, module_name = file.parent, file.stem
    else:
        search_path = root
    if str(search_path) not in sys.path:
        sys.path.insert(0, str(search_path))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise UserError(f"{key_path}: no module named {module_name!r} next to {root}; check the name") from None
        raise UserError(f"{key_path}: importing {module_name!r} failed: {_one_line(exc)}") from None
    except Exception as exc:  # the user's module raised while importing
        raise UserError(f"{key_path}: importing {module_name!r} raised {_one_line(exc)}") from None
    target = getattr(module, attr, None)
    if target is None:
        raise UserError(f"{key_path}: module {module_name!r} has no attribute {attr!r}; check the name after ':'")
    if not callable(target):
        raise UserError(f"{key_path}: {ref!r} is a {type(target).__name__}, not a callable")
    return target


def load_train_job(config: AdvisorConfig) -> Callable[[], Any]:
    """Resolves every reference of a `train` workload; returns the builder of its `TrainJob`
    (called in the measurement child, where the model and data are made)."""
    spec = config.workload
    model_fn = resolve_callable(spec.model, config.root, "workload.model")
    dataset_fn = resolve_callable(spec.dataset, config.root, "workload.dataset")
    loss_fn = resolve_callable(spec.loss, config.root, "workload.loss") if spec.loss else None
    collate = resolve_callable(spec.collate, config.root, "workload.collate") if spec.collate else None
    step = resolve_callable(spec.step, config.root, "workload.step") if spec.step else None
    make_optimizer = optimizer_factory(spec.optimizer, config.root)

    def build():
        from advisor.harness.train import TrainJob

        model = check_model(call_user(model_fn, spec.model_args, "workload.model"), "workload.model")
        data = call_user(dataset_fn, spec.dataset_args, "workload.dataset")
        dataset, sampler, own_collate, shuffle = unpack_loader(data, spec.dataloader.shuffle)
        return TrainJob(model=model, dataset=dataset, make_optimizer=make_optimizer, loss=loss_fn, step=step,
                        collate=collate or own_collate, sampler=sampler, shuffle=shuffle)

    return build


def load_infer_job(config: AdvisorConfig) -> Callable[[], Any]:
    """Resolves an `infer` workload's references; returns the builder of its `InferJob`."""
    spec = config.workload
    model_fn = resolve_callable(spec.model, config.root, "workload.model")
    requests_fn = resolve_callable(spec.requests, config.root, "workload.requests")
    handler = resolve_callable(spec.handler, config.root, "workload.handler") if spec.handler else None

    def build():
        from advisor.harness.infer import InferJob

        model = check_model(call_user(model_fn, spec.model_args, "workload.model"), "workload.model")
        return InferJob(model, call_user(requests_fn, spec.requests_args, "workload.requests"), handler)

    return build


def check_model(model: Any, key_path: str) -> Any:
    import torch

    if not isinstance(model, torch.nn.Module):
        raise UserError(f"{key_path}: the builder returned {type(model).__name__}; return a torch.nn.Module")
    return model


def unpack_loader(data: Any, shuffle: bool) -> tuple[Any, Any, Optional[Callable], bool]:
    """A dataset builder may return the user's DataLoader: its dataset, its own sampler and its
    collate function are kept (advisor rebuilds the loader around them with the plan's settings)."""
    from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, default_collate

    if not isinstance(data, DataLoader):
        return data, None, None, shuffle
    own_sampler = not isinstance(data.sampler, (RandomSampler, SequentialSampler))
    collate = None if data.collate_fn is default_collate else data.collate_fn
    return data.dataset, data.sampler if own_sampler else None, collate, isinstance(data.sampler, RandomSampler)


def optimizer_factory(spec: Any, root: Path) -> Callable[[Any], tuple[Any, Callable[[], None]]]:
    """`optimizer: {name: ..., **options}` (a torch.optim name or a dotted path to any optimizer
    class) or a builder `build_optimizer(model) -> optimizer`; the result makes the optimizer
    for the model as the plan wrapped it, with nothing to do after each step."""
    if isinstance(spec, dict):
        options = dict(spec)
        name = options.pop("name")
        cls = optimizer_class(name)

        def from_class(model):
            try:
                return cls(model.parameters(), **options), _nothing
            except (TypeError, ValueError) as exc:
                raise UserError(f"workload.optimizer: {name} rejected its options: {exc}") from None

        return from_class
    builder = resolve_callable(spec, root, "workload.optimizer")

    def from_builder(model):
        optimizer = builder(model)
        if not (hasattr(optimizer, "step") and hasattr(optimizer, "zero_grad")):
            raise UserError(f"workload.optimizer: the builder returned {type(optimizer).__name__}; return an optimizer "
                            "(an object with step() and zero_grad())")
        return optimizer, _nothing

    return from_builder


def optimizer_class(name: str) -> type:
    """A bare name is looked up in torch.optim; a dotted path is imported."""
    import torch

    if "." not in name:
        cls = getattr(torch.optim, name, None)
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
            raise UserError(f"workload.optimizer.name: {name!r} is not a torch.optim optimizer; try SGD or AdamW, "
                            "or give a dotted path (package.module.Class)")
        return cls
    module_name, _, attr = name.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"workload.optimizer.name: {name!r} does not import ({exc}); install its package or fix "
                        "the dotted path") from None
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise UserError(f"workload.optimizer.name: module {module_name!r} has no class {attr!r}; check the name")
    return cls


def _nothing() -> None:
    return None


def load_pipeline(config: AdvisorConfig):
    """Resolves a pipeline's transform and combine."""
    import inspect

    from advisor.harness.pipeline import PipelineCode

    spec = config.workload
    transform = resolve_callable(spec.transform, config.root, "workload.transform")
    combine = resolve_callable(spec.combine, config.root, "workload.combine") if spec.combine else None
    roots = {str(config.root)}
    for fn in (transform, combine):
        source = inspect.getsourcefile(fn) if fn is not None else None
        if source:
            roots.add(str(Path(source).resolve().parent))
    return PipelineCode(transform=transform, combine=combine, roots=tuple(sorted(roots)))


def call_user(fn: Callable, kwargs: dict, key_path: str) -> Any:
    """Calls a user's builder; a TypeError from bad arguments is the user's to fix."""
    try:
        return fn(**kwargs)
    except TypeError as exc:
        if _raised_by_call_itself(exc):
            raise UserError(f"{key_path}_args: {exc}; fix the arguments in the config") from None
        raise


def _raised_by_call_itself(exc: TypeError) -> bool:
    # A TypeError whose traceback ends in this frame came from binding the arguments.
    return len(traceback.extract_tb(exc.__traceback__)) == 1


def _one_line(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}{': ' + message if message else ''}{where}"


# ---------------------------------------------------------------- Lightning


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


# ---------------------------------------------------------------- in the measurement child
# Each kind's entry, named by its config section (`CHILD_RUN`): the job loaded, then run under
# the spec's plan. The loops are imported here, not above: a pipeline's child never imports torch.


def run_train(config: AdvisorConfig, spec: dict) -> dict:
    from advisor.harness import train

    return train.run(config, load_train_job(config), spec["plan"], spec["mode"], spec["steps"], spec.get("progress"))


def run_lightning(config: AdvisorConfig, spec: dict) -> dict:
    from advisor.harness import train

    return train.run(config, load_lightning_job(config), spec["plan"], spec["mode"], spec["steps"], spec.get("progress"))


def run_infer(config: AdvisorConfig, spec: dict) -> dict:
    from advisor.harness import infer

    return infer.run(config, load_infer_job(config), spec["plan"], spec["mode"], spec.get("output"), spec.get("progress"))


def run_pipeline(config: AdvisorConfig, spec: dict) -> dict:
    from advisor.harness import pipeline

    return pipeline.run(config, load_pipeline(config), spec["plan"], spec["mode"], spec.get("output"),
                        spec.get("scratch"))


def run_script(config: AdvisorConfig, spec: dict) -> dict:
    from advisor.harness import script

    return script.run(config, spec["plan"], spec["mode"], spec["steps"], spec["scratch"], bool(spec.get("sandbox")))
