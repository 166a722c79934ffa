"""The ``plain`` backend: rlimits, a new session and a pids cgroup where available; no namespaces.

It shares the host's network, filesystem and process view: it hides no file, so the tasks' answers in
pdbgym's package folder are readable (see ``runtime.py`` for what bwrap mounts instead). Use it where
bubblewrap cannot run, and only for code you would run on the host anyway, never for an agent whose
reward depends on not reading them. It cannot make paths of the workspace read-only for a
run (no mount namespace): ``binds_readonly`` is False and ``run`` refuses ``readonly_paths``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pdbgym.errors import SandboxError
from pdbgym.sandbox.base import Sandbox
from pdbgym.sandbox.limits import Limits


class PlainSandbox(Sandbox):
    name = "plain"
    isolated = False

    def wrap(self, argv: list[str], workspace: Path, limits: Limits,
             readonly_paths: Sequence[Path] = ()) -> list[str]:
        if readonly_paths:
            raise SandboxError("the plain sandbox cannot bind paths read-only; check Sandbox.binds_readonly")
        return list(argv)
