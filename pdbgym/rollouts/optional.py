"""Optional imports for the rollouts package: a missing extra is a cache-format error naming what to install."""

from __future__ import annotations

from types import ModuleType

from pdbgym import versions
from pdbgym.rollouts.record import CacheFormatError


def import_optional(module: str, extra: str, purpose: str) -> ModuleType:
    """``versions.import_optional`` raising ``CacheFormatError``."""
    return versions.import_optional(module, extra, purpose, CacheFormatError)
