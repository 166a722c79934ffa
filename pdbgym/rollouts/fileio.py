"""Optional imports for the rollouts package; atomic writes live in ``pdbgym.fileio`` (re-exported)."""

from __future__ import annotations

import importlib
from types import ModuleType

from pdbgym.fileio import atomic_target, write_json_atomic
from pdbgym.rollouts.record import CacheFormatError


def import_optional(module: str, extra: str, purpose: str) -> ModuleType:
    """Import a dependency of an optional extra, or say which extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise CacheFormatError(f"{purpose} needs {module}: pip install 'pdbgym[{extra}]'") from exc


__all__ = ["atomic_target", "import_optional", "write_json_atomic"]
