"""One engine per loaded model and process: every consumer of the same model object shares its batches."""

from __future__ import annotations

import threading
from typing import Any

from pdbgym.engine.core import EngineSettings, LocalEngine

_ENGINES: dict[int, tuple[Any, LocalEngine]] = {}
_LOCK = threading.Lock()
_EXPECTED = [0, 0]  # rows, prompt ids


def expect_rows(rows: int, prompt_ids: int = 0) -> None:
    """Up to ``rows`` requests will be live at once in this process, with prompts of up to ``prompt_ids``
    ids: every shared engine, now and later, sizes its static sessions for them (``LocalEngine.expect``)."""
    with _LOCK:
        _EXPECTED[0] = max(_EXPECTED[0], int(rows))
        _EXPECTED[1] = max(_EXPECTED[1], int(prompt_ids))
        for _, engine in _ENGINES.values():
            engine.expect(rows, prompt_ids)


def engine_for(model: Any, stops: set[int], pad_id: int, settings: EngineSettings | None = None) -> LocalEngine:
    """The engine serving ``model`` in this process (made on first use with ``stops``, ``pad_id`` and
    ``settings``; later callers share it, whatever they pass)."""
    with _LOCK:
        held = _ENGINES.get(id(model))
        if held is None or held[0] is not model:
            held = (model, LocalEngine(model, stops, pad_id, settings))
            held[1].expect(*_EXPECTED)
            _ENGINES[id(model)] = held
        return held[1]


def serve_with(model: Any, engine: Any) -> None:
    """Make ``engine`` the one serving ``model`` in this process (closing the one it replaces): a
    ``LocalEngine`` of other settings, or any object with its ``submit``/``generate``/``expect``/
    ``forget_prefixes``/``close`` methods and ``stats`` (a bench's baseline sampler, played through the same
    episodes)."""
    with _LOCK:
        held = _ENGINES.get(id(model))
        _ENGINES[id(model)] = (model, engine)
        engine.expect(*_EXPECTED)
    if held is not None and held[1] is not engine:
        held[1].close()


def release_engine(model: Any) -> bool:
    """Close the shared engine of ``model`` and forget it (with its kept caches and its hold on the model),
    so the model can be freed; a later ``engine_for`` makes a new one. Whether there was one."""
    with _LOCK:
        held = _ENGINES.get(id(model))
        if held is None or held[0] is not model:
            return False
        del _ENGINES[id(model)]
    held[1].close()
    return True
