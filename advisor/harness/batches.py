"""Batches of any structure: tensors inside tuples, lists, dicts and dataclasses, nested.

The loop moves a batch to the device, counts its samples and splits it into micro-batches
without knowing its shape, so a Hugging Face dict batch travels the same road as `(x, y)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable, Optional

import torch


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """`batch` with `fn` applied to every tensor in it, the containers rebuilt as they were."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        return {key: map_tensors(value, fn) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(map_tensors(item, fn) for item in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(map_tensors(item, fn) for item in batch)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return dataclasses.replace(batch, **{f.name: map_tensors(getattr(batch, f.name), fn)
                                             for f in dataclasses.fields(batch) if f.init})
    return batch


def tensors(batch: Any) -> list[torch.Tensor]:
    """Every tensor in the batch, in order."""
    found: list[torch.Tensor] = []
    map_tensors(batch, lambda tensor: found.append(tensor))
    return found


def first_tensor(batch: Any) -> Optional[torch.Tensor]:
    found = tensors(batch)
    return found[0] if found else None


def to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    if device.type == "cpu":
        return batch
    return map_tensors(batch, lambda tensor: tensor.to(device, non_blocking=non_blocking))


def batch_length(batch: Any) -> int:
    """Samples in a batch: the leading dimension of its first tensor."""
    first = first_tensor(batch)
    return int(first.shape[0]) if first is not None and first.dim() else 1


def split_batch(batch: Any, parts: int) -> list[Any]:
    """The batch as `parts` micro-batches: every tensor with the batch's leading length split
    along dim 0 (the last parts one sample shorter when it does not divide); the rest shared."""
    length = batch_length(batch)
    parts = max(1, min(parts, length))

    def part(index: int) -> Any:
        def piece(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.dim() and tensor.shape[0] == length:
                return tensor.tensor_split(parts)[index]
            return tensor
        return map_tensors(batch, piece)

    return [part(index) for index in range(parts)]


def concat(items: list) -> Any:
    """Batches of the same structure joined into one: each tensor the concatenation of theirs
    along dim 0; anything else taken from the first."""
    first = items[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(items)
    if isinstance(first, Mapping):
        return {key: concat([item[key] for item in items]) for key in first}
    if isinstance(first, (tuple, list)):
        return type(first)(concat(list(parts)) for parts in zip(*items))
    return first


def describe(value: Any) -> str:
    """A short structural description, for error messages and the fingerprint."""
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{key}: {describe(item)}" for key, item in list(value.items())[:8]) + "}"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}(" + ", ".join(describe(item) for item in value[:4]) + ")"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return f"{type(value).__name__}(" + ", ".join(
            f"{f.name}={describe(getattr(value, f.name))}" for f in dataclasses.fields(value)[:6]) + ")"
    return type(value).__name__
