"""Dynamic int8 quantization: Linear and LSTM weights stored as int8, activations quantized on
the fly, on the CPU. Smaller weights and int8 matmuls; outputs move within a tolerance."""

from __future__ import annotations

from typing import Any, Optional

from advisor.recipes.base import Choice, Context, Recipe


def why_not(context: Context) -> Optional[str]:
    if context.device != "cpu":
        return "dynamic quantization runs on the CPU only; this service runs on CUDA"
    if not context.linear_layers:
        return "the model has no Linear or LSTM layer to quantize outside torch's Transformer layers"
    engines = supported_engines()
    if not engines:
        return "this torch build has no quantized engine (fbgemm, x86 or qnnpack)"
    return None


def supported_engines() -> list[str]:
    import torch

    return [engine for engine in torch.backends.quantized.supported_engines if engine != "none"]


def quantizable(model: Any) -> set[str]:
    """The names of the Linear and LSTM layers dynamic quantization may replace: all but those
    inside torch's Transformer layers and attention, which read their layers' weights as tensors
    (a quantized layer's weight is a method: "'function' object has no attribute 'device'")."""
    import torch

    readers = (torch.nn.TransformerEncoderLayer, torch.nn.TransformerDecoderLayer, torch.nn.MultiheadAttention)
    kept = {f"{name}.{inner}".strip(".") for name, module in model.named_modules()
            if isinstance(module, readers) for inner, _ in module.named_modules()}
    return {name for name, module in model.named_modules()
            if isinstance(module, (torch.nn.Linear, torch.nn.LSTM)) and name not in kept}


def quantize(model: Any, dtype: Optional[str]) -> Any:
    if not dtype:
        return model
    import warnings

    import torch
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch marks its eager quantization deprecated; it still runs
        return quantize_dynamic(model, quantizable(model), dtype=getattr(torch, dtype))


def recipe_clash(words: str, plan: dict, text: str = "") -> str:
    """Names the recipe pair behind a crash only their mix causes, where torch's words point at
    neither: autocast's half precision reaching a dynamically quantized layer, which takes
    float32 only (seen under inference mode, whose fast Transformer path keeps autocast's dtype)."""
    dtype = plan.get("amp.dtype")
    if dtype and plan.get("quantize_dynamic.dtype") and "expected scalar type Float" in text:
        return words + (f"amp ({dtype} autocast) and quantize_dynamic do not run together here: "
                        f"a {dtype} tensor reached an int8 layer, which takes float32: ")
    return words


def snippet(plan: dict) -> str:
    return ("from torch.ao.quantization import quantize_dynamic\n"
            "# torch's Transformer layers and attention read their Linear weights as tensors: they stay in float\n"
            "readers = (torch.nn.TransformerEncoderLayer, torch.nn.TransformerDecoderLayer, torch.nn.MultiheadAttention)\n"
            "kept = {f\"{n}.{i}\".strip(\".\") for n, m in model.named_modules() if isinstance(m, readers) for i, _ in m.named_modules()}\n"
            "layers = {n for n, m in model.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.LSTM)) and n not in kept}\n"
            "model = quantize_dynamic(model.eval(), layers, dtype=torch.qint8)")


RECIPE = Recipe(
    name="quantize_dynamic",
    summary="int8 weights for Linear and LSTM layers (dynamic quantization, CPU)",
    targets=("compute", "memory"),
    risk="tolerance",
    keys=("quantize_dynamic.dtype",),
    why_not=why_not,
    space=lambda context: {"quantize_dynamic.dtype": Choice((None, "qint8"))},
    snippet=snippet,
    textbook=lambda context: {"quantize_dynamic.dtype": "qint8"},
    kinds=("infer",),
    hooks={"model": lambda model, plan: quantize(model, plan.get("quantize_dynamic.dtype")), "failure": recipe_clash},
)
