"""Optional imports for the rollouts package: a missing extra is a clear error naming what to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from pdbgym.rollouts.record import CacheFormatError
from pdbgym.versions import MINIMUM, require


def import_optional(module: str, extra: str, purpose: str) -> ModuleType:
    """Import a dependency of an optional extra, or say which extra to install."""
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        raise CacheFormatError(f"{purpose} needs {module}: pip install 'pdbgym[{extra}]'") from exc
    package = module.partition(".")[0]
    if package in MINIMUM:
        require(package)
    return imported
