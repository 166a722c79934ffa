"""Model references that are not paths: a hook through which adapter-store names become model folders.

Lower layers (``agent``, ``divergence``, ``evaluate``) load models from folders and may not import the
adapter store; the command line registers the store's resolver at start-up
(``pdbgym.adapters.stacked.register_store_refs``), and library code may do the same. A reference is
then turned into a folder holding the merged weights of its whole lineage (verified while merging),
made once per artifact and reused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelRefResolver:
    """``is_ref(text)`` answers cheaply; ``materialize(text)`` returns a local model folder (may be slow)."""

    is_ref: Callable[[str], bool]
    materialize: Callable[[str], Path]


_RESOLVERS: list[ModelRefResolver] = []


def register_model_refs(resolver: ModelRefResolver) -> None:
    """Add a resolver (once; registering the same one again is a no-op)."""
    if resolver not in _RESOLVERS:
        _RESOLVERS.append(resolver)


def is_model_ref(text: str) -> bool:
    """Whether a registered resolver recognises ``text`` (an existing path never is a reference)."""
    if not text or Path(text).expanduser().exists():
        return False
    return any(resolver.is_ref(text) for resolver in _RESOLVERS)


def local_model_path(text: str) -> str:
    """``text`` itself when it is not a reference, else the folder its resolver materializes."""
    if not text or Path(text).expanduser().exists():
        return text
    for resolver in _RESOLVERS:
        if resolver.is_ref(text):
            return str(resolver.materialize(text))
    return text
