"""The LoRA and DoRA merge math, one weight tensor at a time. Pure functions: tensors in, tensors out.

Shapes use the nn.Linear convention W: (out_features, in_features), A: (r, in), B: (out, r). With
``fan_in_fan_out`` (GPT-2's Conv1D) the stored weight is W^T: (in, out) and the delta is transposed too.
All arithmetic runs in float32; the result is cast once, at the end, to the weight's own dtype or the
``dtype`` asked for (a float32 copy of a bf16 model keeps a delta smaller than W's rounding step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def lora_delta(lora_a: torch.Tensor, lora_b: torch.Tensor, scaling: float, fan_in_fan_out: bool) -> torch.Tensor:
    """scale * B @ A in float32, laid out like the stored weight ((in, out) when fan_in_fan_out)."""
    delta = (lora_b.float() @ lora_a.float()).mul_(scaling)  # in place: the product is a fresh tensor
    return delta.T if fan_in_fan_out else delta


def output_row_norms(weight: torch.Tensor, fan_in_fan_out: bool) -> torch.Tensor:
    """L2 norm of each output row of W, shape (out,): PEFT's DoRA norm axis (dim=1 of the (out, in) view)."""
    import torch  # optional: torch (pdbgym[hf])

    oriented = weight.float().T if fan_in_fan_out else weight.float()
    return torch.linalg.norm(oriented, dim=1)


def merge_lora(weight: torch.Tensor, delta: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """W' = W + scale * B @ A, returned in ``dtype`` (default W's)."""
    return (weight.float() + delta).to(dtype or weight.dtype)


def merge_dora(weight: torch.Tensor, delta: torch.Tensor, magnitude: torch.Tensor, fan_in_fan_out: bool,
               dtype: torch.dtype | None = None) -> torch.Tensor:
    """W' = m * (W + scale * B @ A) / ||W + scale * B @ A||, the norm taken per output row; in ``dtype``
    (default W's)."""
    combined = weight.float() + delta
    factor = magnitude.float() / output_row_norms(combined, fan_in_fan_out)
    combined.mul_(factor.view(1, -1) if fan_in_fan_out else factor.view(-1, 1))  # one full-size buffer, not two
    return combined.to(dtype or weight.dtype)


def merge_module(
    weight: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    magnitude: torch.Tensor | None,
    scaling: float,
    fan_in_fan_out: bool,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Merge one adapted module into its weight: DoRA when a magnitude vector is given, else LoRA; the
    result in ``dtype`` (default the weight's)."""
    expected = (lora_a.shape[1], lora_b.shape[0]) if fan_in_fan_out else (lora_b.shape[0], lora_a.shape[1])
    if tuple(weight.shape) != expected:
        raise ValueError(f"weight {tuple(weight.shape)} does not fit A {tuple(lora_a.shape)} / B {tuple(lora_b.shape)}")
    delta = lora_delta(lora_a, lora_b, scaling, fan_in_fan_out)
    if magnitude is None:
        return merge_lora(weight, delta, dtype)
    return merge_dora(weight, delta, magnitude, fan_in_fan_out, dtype)
