"""A DoRA delta's training forward in one fused pass a layer (``fuse_dora``), the same function as PEFT's.

A DoRA layer's output is ``g * (W x + s B A x)``, where ``g = m / ||W + s B A||`` per output feature (the
norm held constant in the backward, as the DoRA paper and PEFT do). PEFT computes it as
``W x + (g - 1) * W x + g * s * (B A x)`` in float32: on every linear layer, in the forward, the recompute of
gradient checkpointing and the backward, about six float32 passes over a ``[ids, out_features]`` tensor,
and the layer's input copied to float32 and back to bf16 for the adapter's matmul. For a 135M model those
passes, not the matmuls, were the update: of 2.39 s of kernels in one forward and backward of a real step's
84,149 ids on an H100, multiplications, copies and additions took 1.67 s and the matmuls 0.24 s
(``bench/grpo_scoring.py --profile``, ``docs/benchmarks.md``).

``FusedDoraVariant`` extends PEFT's ``DoraLinearVariant``: in training mode its forward computes the norms
with no gradient (a small ``[out, in]`` matrix, in float32 outside autocast), the adapter's matmuls on the
layer's input as autocast gives it, and ``g * (W x + s B A x)`` in float32 arithmetic written back in the
layer's output dtype as one function, its backward written out beside it (``_Combine``): on a GPU each
compiled by inductor (shapes dynamic; one forward graph serves passes with and without gradients, one
backward graph every backward), elsewhere the same expressions eagerly. Outside training (the engine's
live decode, which caches PEFT's norms for a round) and for layers it does not cover (a bias, dropout, a
quantized or transposed base weight), PEFT's own forward runs. Merging, saving and loading are PEFT's: the variant
changes no parameter.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

__all__ = ["dora_combine", "fuse_dora", "fused_variant"]


def _combine(base: torch.Tensor, lora: torch.Tensor, scale: torch.Tensor, scaling: float) -> torch.Tensor:
    """``scale * (base + scaling * lora)`` in float32, in ``base``'s dtype."""
    return (scale * (base.float() + scaling * lora.float())).to(base.dtype)


def _combine_backward(grad: torch.Tensor, base: torch.Tensor, lora: torch.Tensor, scale: torch.Tensor,
                      scaling: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_combine``'s gradients with respect to ``base``, ``lora`` and ``scale`` (``[ids, features]``,
    ``[ids, features]``, ``[features]``) from the output's, in float32 arithmetic as autograd computes them,
    each in its input's dtype."""
    g = grad.float()
    factor = scale.float()
    summed = (g * (base.float() + scaling * lora.float())).sum(0)
    return (g * factor).to(base.dtype), (g * (factor * scaling)).to(lora.dtype), summed.to(scale.dtype)


class _Combine(torch.autograd.Function):
    """``_combine`` with its backward written out (``_combine_backward``), each run as given (eager or compiled).
    Compiled through autograd instead, the function was one joint forward-and-backward graph, compiled again for
    passes without gradients (grad mode is one of its guards); written out, the forward is one graph for both
    and the backward another, both compiled as plain functions."""

    @staticmethod
    def forward(ctx: Any, base: torch.Tensor, lora: torch.Tensor, scale: torch.Tensor, scaling: float,
                forward: Any, backward: Any) -> torch.Tensor:
        ctx.save_for_backward(base, lora, scale)
        ctx.scaling, ctx.backward = scaling, backward
        # detached: the inputs' requires_grad flags are guards of a compiled function, and the forward computes
        # no gradient, so the graph taken outside autograd (no gradient asked for) serves here too
        return forward(base.detach(), lora.detach(), scale.detach(), scaling)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        base, lora, scale = ctx.saved_tensors
        # detached: a gradient that is a view of another tensor would guard on that tensor's shape as well
        return (*ctx.backward(grad.detach(), base.detach(), lora.detach(), scale.detach(), ctx.scaling), None, None,
                None)


@cache
def _compiled() -> tuple[Any, Any]:
    return (torch.compile(_combine, dynamic=True, fullgraph=True),
            torch.compile(_combine_backward, dynamic=True, fullgraph=True))


def dora_combine(base: torch.Tensor, lora: torch.Tensor, scale: torch.Tensor, scaling: float,
                 compiled: bool | None = None) -> torch.Tensor:
    """A DoRA layer's output from its base output, its adapter's output and ``scale = m / ||W + s B A||``.
    ``compiled``: through inductor (default: on a GPU)."""
    if compiled is None:
        compiled = base.is_cuda
    forward, backward = _compiled() if compiled else (_combine, _combine_backward)
    # as [ids, features]: dynamic shapes specialise a dimension of size 1, so a batch of one row and a batch of
    # several would each compile, forward and backward, where the rows' ids together are never one
    features = base.shape[-1]
    flat = (base.reshape(-1, features), lora.reshape(-1, features), scale.reshape(features))
    if torch.is_grad_enabled() and any(t.requires_grad for t in flat):
        out = _Combine.apply(*flat, scaling, forward, backward)
    else:
        with torch.no_grad():  # grad mode off, as in the autograd function's forward: one graph for both
            out = forward(*(t.detach() for t in flat), scaling)
    return out.view(base.shape)


@cache
def fused_variant() -> type:
    """``FusedDoraVariant``, made on first use (peft is imported with the trainer)."""
    from peft.tuners.lora.variants import DoraLinearVariant  # optional: peft (pdbgym[train])

    class FusedDoraVariant(DoraLinearVariant):
        """PEFT's DoRA variant with the training forward fused (the module docstring)."""

        @staticmethod
        def forward(module: Any, active_adapter: str, x: torch.Tensor, result: torch.Tensor,
                    **kwargs: Any) -> torch.Tensor:
            lora_A, lora_B = module.lora_A[active_adapter], module.lora_B[active_adapter]
            if not covered(module, active_adapter):
                # the layer's input cast as PEFT casts it (fuse_dora turned that cast off for the fused path)
                return DoraLinearVariant.forward(module, active_adapter, x.to(lora_A.weight.dtype), result, **kwargs)
            scaling = module.scaling[active_adapter]
            weight = module.get_base_layer().weight
            with torch.no_grad(), torch.autocast(x.device.type, enabled=False):
                delta = lora_B.weight.float() @ lora_A.weight.float()
                norm = torch.linalg.vector_norm(weight.float() + scaling * delta, dim=1)
            magnitude = module.lora_magnitude_vector[active_adapter].weight
            scale = magnitude / norm.to(magnitude.dtype)  # [out], broadcast over the ids
            if not torch.is_autocast_enabled(x.device.type):
                x = x.to(lora_A.weight.dtype)
            return dora_combine(result, lora_B(lora_A(x)), scale, scaling)

    return FusedDoraVariant


def covered(module: Any, adapter: str) -> bool:
    """Whether the fused forward computes this layer: training mode, a plain float weight without bias, in
    ``[out, in]`` layout, and no dropout on the adapter's input."""
    base = module.get_base_layer()
    return (module.training and isinstance(base, torch.nn.Linear) and base.bias is None
            and not getattr(module, "fan_in_fan_out", False) and base.weight.dtype.is_floating_point
            and isinstance(module.lora_dropout[adapter], torch.nn.Identity))


def fuse_dora(model: Any) -> int:
    """Give every DoRA linear layer of ``model`` (a PEFT model) the fused training forward; the number of
    layers changed. The layers' own input cast to the adapter's dtype is turned off (the fused forward casts
    only where autocast does not)."""
    try:
        from peft.tuners.lora.layer import Linear  # optional: peft (pdbgym[train])
        from peft.tuners.lora.variants import DoraLinearVariant  # optional: peft (pdbgym[train])
    except ImportError:
        return 0
    fused = fused_variant()
    changed = 0
    for module in model.modules():
        variants = getattr(module, "lora_variant", None)
        if not isinstance(module, Linear) or not variants:
            continue
        for adapter, variant in list(variants.items()):
            if isinstance(variant, DoraLinearVariant) and not isinstance(variant, fused):
                variants[adapter] = fused()
                changed += 1
        # the input cast only where every adapter of the layer is a fused one, which casts for itself
        if all(isinstance(variants.get(a), fused) for a in module.lora_A):
            module.cast_input_dtype_enabled = False
    return changed
