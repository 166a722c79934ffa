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
import sys
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


def host_paths_under_tmp() -> list[str]:
    """Folders under /tmp that sandboxed Python needs: its prefixes, pdbgym's source, sys.path entries."""
    import pdbgym

    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(pdbgym.__file__).resolve().parent.parent)}
    candidates.update(p for p in sys.path if p)
    under_tmp = sorted({str(Path(c).resolve()) for c in candidates
                        if Path(c).exists() and Path(c).resolve().is_relative_to("/tmp")})
    # A folder inside one already bound needs no bind of its own.
    return [p for p in under_tmp if not any(p != q and Path(p).is_relative_to(q) for q in under_tmp)]


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
            # The private /tmp hides the host's: bring back, read-only, what the interpreter needs from
            # there (a virtualenv or a checkout under /tmp, as on some CI runners).
            *[arg for path in host_paths_under_tmp() for arg in ("--ro-bind", path, path)],
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
