"""Regional compilation of a model's forward: its decoder layers run through one inductor compile of their class's
``forward``, with dimensions dynamic, while the rest of the forward stays eager. The engine's compiled mode
(``EngineSettings(graphs="compiled")``) runs its decode steps (then recorded in a CUDA graph) and its prefill
passes through it: a small model's forward is bound by how many operators Python calls and launches, and the
layers' compile makes those a few fused kernels a layer."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from pdbgym.engine.kv import counts_writes


def compiled_forward(model: Any) -> Callable[..., Any]:
    """The model's forward with each decoder layer run through one inductor compile of the layers' class (regional
    compilation), made once per model object and kept on it (so it goes with the model). It is compiled with its
    dimensions dynamic from the first shape, so every later shape reuses it (``tests/engine/test_compiled_step.py``;
    compiled for the first shape's sizes, the second shape compiled it again). The layers repeat one code, so one
    compile serves all of them: 12.8 s on an H100 for one SmolLM2-135M shape, where its whole forward compiled took
    86 s (``docs/benchmarks.md``). Their cache writes stay out of the graphs
    (``kv.counted_cache``), so the compiler does not specialize on a layer's index, and so do the
    embedding, the final norm and the vocabulary projection, once a step. Only the forward is compiled: with the
    draw compiled too, inductor's GPU code generation failed on the draw's integer hashing (an H100, torch
    2.11). A model without a list of like layers, or whose layers attend differently (``config.layer_types``),
    has its whole forward compiled."""
    compiled = getattr(model, "_pdbgym_compiled_forward", None)
    if compiled is None:
        layers = repeated_layers(model)
        config = getattr(model, "config", None)
        kinds = set(getattr(config, "layer_types", None) or ())  # layers that attend alike (no sliding window mix)
        compiled = (regional(model, layers) if layers and len(kinds) <= 1
                    else torch.compile(model.forward, dynamic=None))
        object.__setattr__(model, "_pdbgym_compiled_forward", compiled)
    return compiled


def repeated_layers(model: Any) -> list[torch.nn.Module]:
    """The model's decoder layers: the longest ``ModuleList`` of at least two modules of one class, each holding a
    module with an integer ``layer_idx`` (what a layer passes its cache writes; a list of experts holds none);
    [] if there is none."""
    best: list[torch.nn.Module] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > max(1, len(best)) \
                and len({type(m) for m in module}) == 1 \
                and all(any(isinstance(getattr(m, "layer_idx", None), int) for m in layer.modules()) for layer in module):
            best = list(module)
    return best


def regional(model: Any, layers: list[torch.nn.Module]) -> Callable[..., Any]:
    """``model.forward`` whose calls of ``layers`` go through one compile of their class's ``forward`` while it
    runs; after it, each layer's own forward is back (a training forward of the same model stays eager). The
    compiler treats an integer on a module as a constant, so each layer's ``layer_idx`` (the cache write's
    index, the only one that differs between layers) reads 0 meanwhile and the cache counts the layers itself
    (``kv.counted_cache``'s cursor). So while it runs (on a GPU: a prefill pass, and the warm-up and the capture of
    each shape's decode graph, which replays with no Python), the model's layers are not for another thread's
    forward."""
    layer_forward = torch.compile(type(layers[0]).forward, dynamic=True)
    indexed = [m for layer in layers for m in layer.modules() if isinstance(getattr(m, "layer_idx", None), int)]

    def forward(**kwargs: Any) -> Any:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if not counts_writes(cache):  # a cache that does not count its layers' writes
            return model.forward(**kwargs)
        indices = [m.layer_idx for m in indexed]
        for layer in layers:
            layer.forward = functools.partial(layer_forward, layer)
        for module in indexed:
            module.layer_idx = 0
        cache.cursor = 0
        try:
            return model.forward(**kwargs)
        finally:
            cache.cursor = None
            for module, index in zip(indexed, indices, strict=True):
                module.layer_idx = index
            for layer in layers:
                del layer.forward

    return forward
