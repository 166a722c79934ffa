"""The ``plain`` backend: rlimits, a new session and a pids cgroup where available; no namespaces.

It shares the host's network, filesystem and process view. Use it where bubblewrap cannot run, and
only for code you would run on the host anyway.
"""

from __future__ import annotations

from pathlib import Path

from pdbgym.sandbox.base import Sandbox
from pdbgym.sandbox.limits import Limits


class PlainSandbox(Sandbox):
    name = "plain"
    isolated = False

    def wrap(self, argv: list[str], workspace: Path, limits: Limits) -> list[str]:
        return list(argv)
