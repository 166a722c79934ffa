"""Confined command execution: workspaces, limits, and backends (bubblewrap, plain rlimits).

A backend is one file defining a ``Sandbox`` subclass that implements ``wrap``; register it in
``BACKENDS`` below. See docs/sandbox.md for what each backend confines.
"""

from __future__ import annotations

import logging

from pdbgym.errors import SandboxError
from pdbgym.sandbox.base import Sandbox
from pdbgym.sandbox.bwrap import BwrapSandbox, bwrap_unavailable_reason
from pdbgym.sandbox.environment import sandbox_env
from pdbgym.sandbox.limits import Limits, RunResult
from pdbgym.sandbox.plain import PlainSandbox
from pdbgym.sandbox.pty_process import PtyProcess
from pdbgym.sandbox.workspace import Workspace

__all__ = [
    "BACKENDS", "Limits", "PtyProcess", "RunResult", "Sandbox", "Workspace", "get_sandbox", "sandbox_env",
]

BACKENDS: dict[str, type[Sandbox]] = {"bwrap": BwrapSandbox, "plain": PlainSandbox}
logger = logging.getLogger(__name__)


def get_sandbox(kind: str = "auto") -> Sandbox:
    """A sandbox backend by name: "bwrap", "plain", or "auto" (bwrap where it works, else plain).

    "auto" falling back to plain logs a warning, because the command then shares the host's network,
    filesystem and processes. Asking for "bwrap" where it cannot run raises ``SandboxError``.
    """
    if kind == "auto":
        reason = bwrap_unavailable_reason()
        if reason is None:
            return BwrapSandbox()
        return _plain_with_warning(f"falling back from bwrap ({reason}). ")
    if kind not in BACKENDS:
        raise SandboxError(f"unknown sandbox kind {kind!r}; choose one of auto, {', '.join(BACKENDS)}")
    if kind == "bwrap" and (reason := bwrap_unavailable_reason()) is not None:
        raise SandboxError(f"the bwrap sandbox is not available: {reason}; use kind='plain' or 'auto'")
    if kind == "plain":
        return _plain_with_warning()
    return BACKENDS[kind]()


_WARNED: set[str] = set()  # each reason once a process: a campaign asks for a sandbox every episode


def _plain_with_warning(why: str = "") -> Sandbox:
    if why not in _WARNED:
        _WARNED.add(why)
        logger.warning("sandbox: %susing the plain backend, isolation is reduced: rlimits and a new session "
                       "only; commands can reach the network and write anywhere the user can", why)
    return PlainSandbox()
