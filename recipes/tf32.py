"""TF32: float32 matrix multiplies and convolutions on tensor cores, with a 10-bit mantissa.

On Ampere and later GPUs an fp32 model's matmuls run several times faster in TF32, with no
change to the code or the weights' dtype: often the largest free win for a job written in fp32.
PyTorch leaves it off for matmuls (on for cuDNN convolutions) because it rounds the inputs; the
numerics gate judges that rounding against the job's own envelope.
"""

from __future__ import annotations

from typing import Optional

from advisor.recipes.base import Choice, Context, Recipe

AMPERE = 8.0  # the first compute capability with TF32 tensor cores


def why_not(context: Context) -> Optional[str]:
    if context.device != "cuda":
        return "TF32 is a CUDA tensor-core format; on the CPU float32 stays float32"
    if context.gpu_capability and context.gpu_capability < AMPERE:
        return f"this GPU (compute capability {context.gpu_capability:g}) has no TF32 tensor cores (Ampere, 8.0, or later)"
    if context.tf32_already:
        return "the job already lets float32 matmuls run in TF32 (torch.backends.cuda.matmul.allow_tf32)"
    return None


def allow(value: None, plan: dict) -> None:
    """Lets this process's float32 matmuls and convolutions use TF32, before the model is built."""
    if not plan.get("tf32.enabled"):
        return
    import torch  # here, not at the top: a pipeline's process never imports torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def snippet(plan: dict) -> str:
    return ("# first thing in the script, before the model runs:\n"
            "torch.backends.cuda.matmul.allow_tf32 = True  # float32 matmuls on tensor cores (10-bit mantissa)\n"
            "torch.backends.cudnn.allow_tf32 = True  # the same for convolutions (torch's default)")


RECIPE = Recipe(
    name="tf32",
    summary="TF32 tensor cores for float32 matmuls and convolutions (Ampere or later)",
    targets=("compute",),
    risk="tolerance",
    keys=("tf32.enabled",),
    why_not=why_not,
    space=lambda context: {"tf32.enabled": Choice((False, True))},
    snippet=snippet,
    textbook=lambda context: {"tf32.enabled": True},
    kinds=("train", "distributed", "infer", "script"),
    hooks={"process": allow},
    off={"tf32.enabled": False},
)
