"""The environment variables a sandboxed command sees: built from scratch, never inherited."""

from __future__ import annotations

import os
import sys
from pathlib import Path

SANDBOX_HOME_DIR = ".sandbox_home"
_SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin")


def sandbox_env(workspace: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a command working in ``workspace``.

    Nothing is inherited from the caller, so no proxy settings, tokens, PYTHONBREAKPOINT or
    PYTHONSTARTUP leak in. PATH starts with the bin folder of ``sys.executable`` (the venv), HOME is
    ``workspace/.sandbox_home`` (created here), PYTHONPATH is the workspace, bytecode is not written
    (the workspace stays clean for grading), colour codes are off and pytest autoloads no plugins. ``extra`` overrides any of it.
    """
    workspace = Path(workspace).resolve()
    home = workspace / SANDBOX_HOME_DIR
    home.mkdir(exist_ok=True)
    path_dirs = [str(Path(sys.executable).parent), *_SYSTEM_PATH]
    env = {
        "PATH": os.pathsep.join(dict.fromkeys(path_dirs)),
        "HOME": str(home),
        "PYTHONPATH": str(workspace),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TMPDIR": "/tmp",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "PY_COLORS": "0",
        # Autoloading imports every pytest plugin installed beside pdbgym (about 1 s per start);
        # pdbgym names the plugins it needs with -p.
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    if extra:
        env.update({str(key): str(value) for key, value in extra.items()})
    return env
