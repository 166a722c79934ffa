"""Errors raised by the adapter store, merger and acceptance checks."""

from pdbgym.errors import PdbgymError


class AdapterError(PdbgymError):
    """Base class for adapter errors: each message names the artifact and what to do."""


class CorruptArtifactError(AdapterError):
    """An adapter or model folder is unreadable: truncated safetensors, bad JSON, missing files."""


class LineageError(AdapterError):
    """A merge or lookup would depend on weights that are not the ones an adapter was trained against."""
