"""The KV caches the engine fills by hand: transformers' ``DynamicCache`` and ``StaticCache`` tensors.

A static session of the engine keeps one ``StaticCache`` of ``[slots, heads, length, head_dim]`` per
layer and moves a prompt's keys and values into a free slot after prefilling it on its own; it also
sets the cache's write head. Both touch attributes transformers does not promise (``Cache.layers``,
each layer's ``keys``/``values``/``cumulative_length``), so every such access is here, and
``static_cache_problem`` says up front, by name, when the installed transformers lays them out otherwise
(the engine then decodes without a static cache).
"""

from __future__ import annotations

import copy
import functools
import inspect
import weakref
from typing import Any

import torch

_EMPTY: dict[int, tuple[Any, Any]] = {}  # id of a model config: (a weak reference to it, its empty dynamic cache)


def new_dynamic_cache(model: Any) -> Any:
    """An empty ``DynamicCache`` for ``model``'s layers: a copy of one made from its config once. Made from the
    config each time it cost about 0.3 ms of host time (transformers reads every layer's kind from it), paid
    by every kept row and prefill pass of the engine; an empty cache's layers hold nothing to share."""
    from transformers import DynamicCache  # optional: transformers (pdbgym[hf])

    config = model.config
    held = _EMPTY.get(id(config))
    if held is None or held[0]() is not config:  # never handed out: only its copies are written
        held = _EMPTY[id(config)] = (weakref.ref(config), DynamicCache(config=config))
        weakref.finalize(config, _EMPTY.pop, id(config), None)
    out = copy.copy(held[1])
    out.layers = [copy.copy(layer) for layer in held[1].layers]
    return out


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


def _filled(model: Any, keys: list[torch.Tensor], values: list[torch.Tensor]) -> Any:
    """A dynamic cache whose layer i holds ``keys[i]`` and ``values[i]`` as they are (no copy): what
    ``DynamicLayer.update`` would hold after its first call, without the two copies it makes to get there."""
    out = new_dynamic_cache(model)
    for layer, k, v in zip(out.layers, keys, values, strict=True):
        layer.device, layer.keys, layer.values, layer.is_initialized = k.device, k, v, True
    return out


def cut_row(cache: Any, model: Any, row: int, start: int, end: int) -> Any:
    """A new one-row dynamic cache holding row ``row``'s positions ``[start, end)`` of ``cache``: every
    layer's keys copied by one stack (a few kernels, not two copies a layer), each layer a view of it. A
    static cache of the engine (``new_static_cache``) holds its layers in one tensor, so the row's keys are
    one copy out of it and no call a layer."""
    stacked = getattr(cache, STACKED, None)
    if stacked is not None:
        keys, values = (t[:, row:row + 1, :, start:end].clone(memory_format=torch.contiguous_format)
                        for t in stacked[:2])
    else:
        keys = torch.stack([layer.keys[row:row + 1, :, start:end] for layer in cache.layers])
        values = torch.stack([layer.values[row:row + 1, :, start:end] for layer in cache.layers])
    return _filled(model, list(keys.unbind(0)), list(values.unbind(0)))


def join_rows(caches: list[Any], model: Any, width: int) -> Any:
    """One dynamic cache of ``len(caches)`` rows: each one-row cache right-aligned in ``width`` columns,
    zeros to its left (the attention mask hides them). All layers at once: one buffer of
    ``[layers, rows, heads, width, head_dim]`` for keys and one for values, a row's layers copied in one go
    where they are views of one stack (``cut_row``'s), and each layer a view of the buffers."""
    first = caches[0].layers[0].keys
    shape = (len(caches[0].layers), len(caches), first.shape[1], width, first.shape[-1])
    keys = torch.zeros(shape, dtype=first.dtype, device=first.device)
    values = torch.zeros(shape, dtype=first.dtype, device=first.device)
    for i, cache in enumerate(caches):
        n = cache.layers[0].keys.shape[-2]
        keys[:, i, :, width - n:] = _stacked(cache, "keys")
        values[:, i, :, width - n:] = _stacked(cache, "values")
    return _filled(model, list(keys.unbind(0)), list(values.unbind(0)))


def _stacked(cache: Any, name: str) -> torch.Tensor:
    """A one-row cache's ``name`` tensors as ``[layers, heads, length, head_dim]`` (``_all_layers``' row 0)."""
    return _all_layers(cache, name)[:, 0]


def right_align(cache: Any, model: Any, ends: torch.Tensor, width: int) -> Any:
    """A dynamic cache whose row i holds ``cache``'s row i columns ``[ends[i] - width, ends[i])``: rows that
    end at different columns, right-aligned in ``width`` columns (a column before 0 repeats column 0,
    which the attention mask hides, as ``join_rows``' zeros)."""
    columns = (ends[:, None] - width + torch.arange(width, device=ends.device)).clamp(min=0)
    keys = torch.stack([layer.keys for layer in cache.layers])  # [layers, rows, heads, length, head_dim]
    values = torch.stack([layer.values for layer in cache.layers])
    take = columns[None, :, None, :, None].expand(keys.shape[0], -1, keys.shape[2], -1, keys.shape[-1])
    return _filled(model, list(torch.gather(keys, 3, take).unbind(0)), list(torch.gather(values, 3, take).unbind(0)))


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


@functools.cache
def counted_cache(base: type) -> type:
    """transformers' cache class ``base`` (``StaticCache``, ``DynamicCache``) whose ``update`` (the write of a
    layer's new keys and values) the compiler leaves out of its graphs. The engine compiles each decoder layer
    once for all of them (``regional.compiled_forward``); traced, the write would look up its layer by index,
    and the compiler would make one graph per layer. While ``cursor`` is set, the writes of a forward go to the
    layers in the order they come, whatever index the caller passes (the compiled layers all pass 0: an index
    differing between layers would still make a graph each). Otherwise it is ``base.update`` itself."""

    class Counted(base):  # type: ignore[misc, valid-type]
        cursor: int | None = None  # set: the layer the next write is for, counted (``regional.regional``)

        @torch.compiler.disable
        def update(self, key_states: Any, value_states: Any, layer_idx: int, *args: Any, **kwargs: Any) -> Any:
            if self.cursor is not None:  # the layers write in their order, one write each a forward
                layer_idx, self.cursor = self.cursor, self.cursor + 1
            return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    Counted.__name__ = Counted.__qualname__ = f"Engine{base.__name__}"
    return Counted


def engine_static_cache() -> type:
    """``StaticCache`` counting its layers' writes (``counted_cache``): a compiled session's static cache."""
    from transformers import StaticCache  # optional: transformers (pdbgym[hf])

    return counted_cache(StaticCache)


def counts_writes(cache: Any) -> bool:
    """Whether ``cache`` routes its layers' writes by ``cursor`` (``counted_cache``'s classes)."""
    return "cursor" in vars(type(cache))


def counted(cache: Any) -> Any:
    """A copy of ``cache`` as the class of its kind that counts its layers' writes (``counted_cache``): the
    cache and each layer copied shallow, so the tensors are shared and a write (which replaces a dynamic layer's
    tensors by longer ones) leaves ``cache`` as it was (a compiled prefill pass continues a kept cache, made
    plain, and where it fails the pass runs again from that cache)."""
    out = copy.copy(cache)
    out.__class__ = counted_cache(type(cache))
    out.layers = [copy.copy(layer) for layer in cache.layers]
    return out


STACKED = "pdbgym_stacked"  # a static cache's attribute: its layers' keys, values and write heads, one tensor each


def new_static_cache(model: Any, slots: int, length: int, compiled: bool = False, stacked: bool = True) -> Any:
    """A ``StaticCache`` of ``slots`` rows and ``length`` positions, allocated now on the model's device; with
    ``compiled``, one whose writes stay out of compiled graphs (``engine_static_cache``).

    With ``stacked`` (the default), every layer's keys are a view of one ``[layers, slots, heads, length,
    head_dim]`` tensor, its values of another, and its write head an element of one ``[layers]`` tensor
    (kept on the cache as ``STACKED``), so that keeping a row (``cut_row``), placing prefilled rows
    (``place_rows``) and moving the head (``set_head``) are one call for all layers, not one a layer: each
    call is host time in the engine's thread, and each gives up and takes back the interpreter's lock, which
    a GRPO step's episodes hold in turns (docs/benchmarks.md, sixth session)."""
    from transformers import StaticCache  # optional: transformers (pdbgym[hf])

    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    cache = (engine_static_cache() if compiled else StaticCache)(config=config, max_cache_len=length)
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    parameter = next(model.parameters())
    from transformers.cache_utils import StaticLayer  # optional: transformers (pdbgym[hf])

    if not stacked or any(type(layer) is not StaticLayer for layer in cache.layers):  # sliding layers: their own
        cache.early_initialization(slots, heads, head_dim, parameter.dtype, parameter.device)
        return cache
    n = len(cache.layers)
    keys = torch.zeros((n, slots, heads, length, head_dim), dtype=parameter.dtype, device=parameter.device)
    values = torch.zeros_like(keys)
    fake = torch.zeros((slots, heads, 0, head_dim), dtype=parameter.dtype, device=parameter.device)
    for i, layer in enumerate(cache.layers):
        layer.lazy_initialization(fake, fake)  # its own attributes, then one layer's tensors at a time replaced
        layer.keys, layer.values = keys[i], values[i]
        for tensor in (layer.keys, layer.values):
            torch._dynamo.mark_static_address(tensor)
    writes = torch.zeros(n, dtype=cache.layers[0].cumulative_length.dtype, device=parameter.device)
    for i, layer in enumerate(cache.layers):
        layer.cumulative_length = writes[i]
        torch._dynamo.mark_static_address(layer.cumulative_length)
    setattr(cache, STACKED, (keys, values, writes))
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


def cache_tensors(cache: Any) -> list[torch.Tensor]:
    """Every layer's keys and values tensors of a static cache."""
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


def set_head(cache: Any, position: int) -> None:
    """Make the next write of every layer land at ``position``."""
    stacked = getattr(cache, STACKED, None)
    if stacked is not None:
        stacked[2].fill_(position)
        return
    for layer in cache.layers:
        layer.cumulative_length.fill_(position)


def place_rows(static: Any, dynamic: Any, slots: torch.Tensor, end: int) -> None:
    """Copy a prefill's keys and values (``dynamic``: rows left-padded to width P) into ``static`` rows
    ``slots`` at positions ``[end - P, end)``: one copy of every layer at once into a stacked cache
    (``new_static_cache``), else one a layer."""
    stacked = getattr(static, STACKED, None)
    width = dynamic.layers[0].keys.shape[-2]
    if stacked is not None:
        for target, name in zip(stacked[:2], ("keys", "values"), strict=True):
            target[:, slots, :, end - width:end] = _all_layers(dynamic, name).to(target.dtype)
        return
    for target, source in zip(static.layers, dynamic.layers, strict=True):
        target.keys[slots, :, end - width:end] = source.keys.to(target.keys.dtype)
        target.values[slots, :, end - width:end] = source.values.to(target.values.dtype)


def _all_layers(cache: Any, name: str) -> torch.Tensor:
    """A dynamic cache's ``name`` tensors as one ``[layers, rows, heads, length, head_dim]``: the tensor they
    are the layer views of, in order, when they are (``join_rows``, ``cut_row``), else a stack made now."""
    tensors = [getattr(layer, name) for layer in cache.layers]
    base = tensors[0]._base
    if base is not None and base.dim() == 5 and base.shape[0] == len(tensors) \
            and all(t._base is base and t.shape == base.shape[1:] and t.stride() == base.stride()[1:]
                    and t.storage_offset() == base.storage_offset() + i * base.stride(0) for i, t in enumerate(tensors)):
        return base
    return torch.stack(tensors)
