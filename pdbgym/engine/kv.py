"""The KV caches the engine fills by hand: transformers' ``DynamicCache`` and ``StaticCache`` tensors.

A static session of the engine keeps one ``StaticCache`` of ``[slots, heads, length, head_dim]`` per
layer and moves a prompt's keys and values into a free slot after prefilling it on its own; it also
sets the cache's write head. Both touch attributes transformers does not promise (``Cache.layers``,
each layer's ``keys``/``values``/``cumulative_length``), so every such access is here, and
``static_cache_problem`` says up front, by name, when the installed transformers lays them out otherwise
(the engine then decodes without a static cache).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch


def new_dynamic_cache(model: Any) -> Any:
    from transformers import DynamicCache  # optional: transformers (pdbgym[hf])

    return DynamicCache(config=model.config)


def rows_problem(cache: Any) -> str | None:
    """Why ``cache``'s rows cannot be cut out and joined by position (None when they can): every layer
    must be a full-attention ``DynamicLayer`` holding ``keys``/``values`` tensors (a sliding-window layer
    keeps only its last positions, so a column is not a position there)."""
    try:
        from transformers.cache_utils import DynamicLayer  # optional: transformers (pdbgym[hf])
    except ImportError as exc:
        return f"transformers has no DynamicLayer ({exc})"
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return "the model's dynamic cache has layers other than full-attention DynamicLayer"
    if not all(isinstance(getattr(layer, "keys", None), torch.Tensor) for layer in layers):
        return "DynamicLayer no longer holds keys and values tensors"
    return None


def cut_row(cache: Any, model: Any, row: int, start: int, end: int) -> Any:
    """A new one-row dynamic cache holding row ``row``'s positions ``[start, end)`` of ``cache``."""
    out = new_dynamic_cache(model)
    for index, layer in enumerate(cache.layers):
        out.update(layer.keys[row:row + 1, :, start:end].clone(), layer.values[row:row + 1, :, start:end].clone(), index)
    return out


def join_rows(caches: list[Any], model: Any, width: int) -> Any:
    """One dynamic cache of ``len(caches)`` rows: each one-row cache right-aligned in ``width`` columns,
    zeros to its left (the attention mask hides them)."""
    out = new_dynamic_cache(model)
    for index in range(len(caches[0].layers)):
        keys, values = [], []
        for cache in caches:
            layer = cache.layers[index]
            pad = width - layer.keys.shape[-2]
            keys.append(torch.nn.functional.pad(layer.keys, (0, 0, pad, 0)))
            values.append(torch.nn.functional.pad(layer.values, (0, 0, pad, 0)))
        out.update(torch.cat(keys), torch.cat(values), index)
    return out


def right_align(cache: Any, model: Any, ends: torch.Tensor, width: int) -> Any:
    """A dynamic cache whose row i holds ``cache``'s row i columns ``[ends[i] - width, ends[i])``: rows that
    end at different columns, right-aligned in ``width`` columns (a column before 0 repeats column 0,
    which the attention mask hides, as ``join_rows``' zeros)."""
    out = new_dynamic_cache(model)
    columns = (ends[:, None] - width + torch.arange(width, device=ends.device)).clamp(min=0)
    for index, layer in enumerate(cache.layers):
        take = columns[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
        out.update(torch.gather(layer.keys, 2, take), torch.gather(layer.values, 2, take), index)
    return out


def cache_bytes(cache: Any) -> int:
    """Bytes held by the keys and values of ``cache``."""
    return sum(t.numel() * t.element_size() for layer in getattr(cache, "layers", ())
               for t in (getattr(layer, "keys", None), getattr(layer, "values", None)) if isinstance(t, torch.Tensor))


def _forward_parameters(model: Any) -> Any:
    """The parameters of ``model``'s forward(); a PEFT model passes its keywords on to the model it wraps,
    whose forward() decides."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inspect.signature(inner.forward).parameters


def cache_keyword(model: Any) -> str:
    """The forward() keyword for the KV cache: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    return "cache" if "cache" in _forward_parameters(model) else "past_key_values"


def keeps_logits(model: Any) -> bool:
    """Whether ``model``'s forward() takes ``logits_to_keep`` (the columns to project on the vocabulary)."""
    return "logits_to_keep" in _forward_parameters(model)


def new_static_cache(model: Any, slots: int, length: int) -> Any:
    """A ``StaticCache`` of ``slots`` rows and ``length`` positions, allocated now on the model's device."""
    from transformers import StaticCache  # optional: transformers (pdbgym[hf])

    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    cache = StaticCache(config=config, max_cache_len=length)
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    parameter = next(model.parameters())
    cache.early_initialization(slots, heads, head_dim, parameter.dtype, parameter.device)
    return cache


def static_cache_problem(model: Any) -> str | None:
    """Why a static session cannot run on ``model`` here (None when it can)."""
    try:
        from transformers.cache_utils import StaticLayer  # optional: transformers (pdbgym[hf])
    except ImportError as exc:
        return f"transformers has no StaticLayer ({exc})"
    try:
        cache = new_static_cache(model, 1, 16)
    except Exception as exc:  # noqa: BLE001 - any failure means: decode without a static cache
        return f"StaticCache cannot be built for this model ({type(exc).__name__}: {exc})"
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not StaticLayer for layer in layers):
        return "the model's cache has layers other than full-attention StaticLayer (sliding or linear attention)"
    layer = layers[0]
    if not all(isinstance(getattr(layer, name, None), torch.Tensor) for name in ("keys", "values", "cumulative_length")):
        return "StaticLayer no longer holds keys, values and cumulative_length tensors"
    return None


def set_head(cache: Any, position: int) -> None:
    """Make the next write of every layer land at ``position``."""
    for layer in cache.layers:
        layer.cumulative_length.fill_(position)


def place_rows(static: Any, dynamic: Any, slots: torch.Tensor, end: int) -> None:
    """Copy a prefill's keys and values (``dynamic``: rows left-padded to width P) into ``static`` rows
    ``slots`` at positions ``[end - P, end)``."""
    for target, source in zip(static.layers, dynamic.layers, strict=True):
        width = source.keys.shape[-2]
        target.keys[slots, :, end - width:end] = source.keys.to(target.keys.dtype)
        target.values[slots, :, end - width:end] = source.values.to(target.values.dtype)
