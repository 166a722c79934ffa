"""The errors of the ``train`` package."""

from __future__ import annotations

from pdbgym.errors import PdbgymError


class TrainError(PdbgymError):
    """A training run cannot start or its output cannot be recorded."""


class DaggerError(PdbgymError):
    """A DAgger run cannot start: a teacher that cannot label states, tokenizers that differ, held-out tasks."""
