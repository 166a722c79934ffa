"""The ``bwrap`` backend: bubblewrap namespaces around the command.

The host is visible read-only; only the workspace and a private /tmp are writable. No network (a new
network namespace holds only a down loopback), own PID, IPC and UTS namespaces, a new session (so
TIOCSTI cannot reach the caller's terminal), every capability dropped, and the sandbox dies with its
parent. Limits (rlimits, pids cgroup) are applied by the shared spawn code before bwrap starts and are
inherited by everything inside.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from pdbgym.sandbox.base import Sandbox
from pdbgym.sandbox.limits import Limits

BWRAP_ENV_VAR = "PDBGYM_BWRAP"  # path of the bwrap binary, when not on PATH


def bwrap_path() -> str | None:
    return os.environ.get(BWRAP_ENV_VAR) or shutil.which("bwrap")


@functools.cache
def bwrap_unavailable_reason() -> str | None:
    """None when bubblewrap works here, else why not (missing binary, namespaces refused...)."""
    binary = bwrap_path()
    if binary is None:
        return f"bwrap was not found on PATH (install bubblewrap, or set {BWRAP_ENV_VAR})"
    try:
        with tempfile.TemporaryDirectory(prefix="pdbgym-bwrap-probe-") as scratch:
            probe = BwrapSandbox().wrap(["true"], Path(scratch), Limits())  # exactly what runs later
            result = subprocess.run(probe, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not run: {exc}"
    if result.returncode != 0:
        return f"bwrap cannot create namespaces here: {result.stderr.strip() or result.returncode}"
    return None


class BwrapSandbox(Sandbox):
    name = "bwrap"
    isolated = True

    def wrap(self, argv: list[str], workspace: Path, limits: Limits) -> list[str]:
        binary = bwrap_path() or "bwrap"
        workspace_dir = str(workspace)
        return [
            binary,
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--tmpfs", "/tmp",
            "--tmpfs", "/dev/shm",
            # After the /tmp tmpfs, so a workspace under /tmp is still the real, writable one.
            "--bind", workspace_dir, workspace_dir,
            "--chdir", workspace_dir,
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--hostname", "sandbox",
            "--cap-drop", "ALL",
            "--new-session",
            "--die-with-parent",
            "--",
            *argv,
        ]
