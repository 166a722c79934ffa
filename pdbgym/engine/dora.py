"""DoRA layers during a dynamic decode: their weight norms computed once per round, not once per step.

A PEFT DoRA layer recomputes ``B @ A`` and the column norms of ``W + s * B @ A`` on every forward, as
much work per layer as the decode step's own matmul. GRPO decodes with such a delta unmerged (the
trainer's live weights), so on the dynamic path the engine runs a round with PEFT's DoRA cache on and
the model in eval mode: the weights do not change during a round, and the cache is dropped before and
after it, so a round never sees norms of earlier weights. Not used on the static path: a captured graph
would keep reading the tensors cached when it was captured.
"""

from __future__ import annotations

import threading
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


_LOCK = threading.Lock()
_ROUNDS = [0, False]  # DoRA rounds in progress in this process, and PEFT's flag before the first


def _caching(on: bool) -> None:
    """PEFT's process-wide DoRA-cache flag, on while any engine thread runs a DoRA round (counted under a
    lock: PEFT's own ``DoraCaching`` saves and restores the flag, which two overlapping rounds in two
    threads would leave on)."""
    from peft.tuners.lora import dora  # optional: peft (pdbgym[train])

    with _LOCK:
        if on:
            if _ROUNDS[0] == 0:
                _ROUNDS[1] = dora.ENABLE_DORA_CACHING
                dora.ENABLE_DORA_CACHING = True
            _ROUNDS[0] += 1
        else:
            _ROUNDS[0] -= 1
            if _ROUNDS[0] == 0:
                dora.ENABLE_DORA_CACHING = _ROUNDS[1]


@contextmanager
def dora_norms_cached(model: Any) -> Iterator[bool]:
    """Within the block, DoRA layers of ``model`` compute their weight norms once; yields whether it did
    anything (False for a model without DoRA layers). The model is in eval mode within: the caller must
    not hand results to whoever owns the model before the block exits."""
    layers = _dora_layers(model)
    if not layers:
        yield False
        return
    training = model.training
    for layer in layers:
        layer._cache_clear()
    model.eval()
    _caching(True)
    try:
        yield True
    finally:
        _caching(False)
        for layer in layers:
            layer._cache_clear()
        model.train(training)
