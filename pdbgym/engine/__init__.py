"""The local inference engine: every token a local model samples in pdbgym is drawn here.

``LocalEngine`` (``pdbgym.engine.core``) batches the requests of every episode of a process and decodes
them with a static cache and CUDA graphs on a GPU, or a dynamic cache on CPU; ``pdbgym.engine.draw`` is
the sampling step; ``engine_for`` gives the shared engine of a loaded model.
"""

from __future__ import annotations

from pdbgym.engine.core import (
           EngineError,
           EngineRequest,
           EngineResult,
           EngineSettings,
           EngineStats,
           LocalEngine,
)
from pdbgym.engine.shared import engine_for, expect_rows

__all__ = ["EngineError", "EngineRequest", "EngineResult", "EngineSettings", "EngineStats", "LocalEngine",
           "engine_for", "expect_rows"]
