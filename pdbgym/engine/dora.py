"""DoRA layers during a dynamic decode: their weight norms computed once per round, not once per step.

A PEFT DoRA layer recomputes ``B @ A`` and the column norms of ``W + s * B @ A`` on every forward, as
much work per layer as the decode step's own matmul. GRPO decodes with such a delta unmerged (the
trainer's live weights), so on the dynamic path the engine runs a round with PEFT's DoRA cache on and
the model in eval mode: the weights do not change during a round, and the cache is dropped before and
after it, so a round never sees norms of earlier weights. Not used on the static path: a captured graph
would keep reading the tensors cached when it was captured.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any


@cache
def _dora_class() -> type | None:
    try:
        from peft.tuners.lora.dora import DoraLinearLayer  # optional: peft (pdbgym[train])
    except ImportError:
        return None
    return DoraLinearLayer


def _dora_layers(model: Any) -> list[Any]:
    kind = _dora_class()
    if kind is None:
        return []
    return [m for m in model.modules() if isinstance(m, kind) and hasattr(m, "_cache_clear")]


@contextmanager
def dora_norms_cached(model: Any) -> Iterator[None]:
    """Within the block, DoRA layers of ``model`` compute their weight norms once (a no-op without any)."""
    layers = _dora_layers(model)
    if not layers:
        yield
        return
    from peft.helpers import DoraCaching  # optional: peft (pdbgym[train])

    training = model.training
    for layer in layers:
        layer._cache_clear()
    model.eval()
    try:
        with DoraCaching(enabled=True):
            yield
    finally:
        for layer in layers:
            layer._cache_clear()
        model.train(training)
