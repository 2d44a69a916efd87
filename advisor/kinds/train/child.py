"""The train kind's child side: its references resolved into the job, then run by the training loop (`advisor.harness.train`)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable, Optional

from advisor.config import AdvisorConfig
from advisor.errors import UserError
from advisor.workload import call_user, resolve_callable


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


def run_train(config: AdvisorConfig, spec: dict) -> dict:
    from advisor.harness import train

    return train.run(config, load_train_job(config), spec["plan"], spec["mode"], spec["steps"], spec.get("progress"),
                     epoch_end_s=spec.get("epoch_end_s"))
