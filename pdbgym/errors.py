"""Errors shared across pdbgym. Each message names what is wrong and what to do about it."""


class PdbgymError(Exception):
    """Base class for errors pdbgym reports to a user (the CLI prints them without a traceback)."""


class TaskFormatError(PdbgymError):
    """A task folder or task.json is malformed."""


class SandboxError(PdbgymError):
    """A sandboxed command could not be started."""
