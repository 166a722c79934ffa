"""Start pytest for a task's tests in an isolated interpreter: ``python -I -B .../pdbgym/tasks/pytest_launch.py
ROOT [pytest arguments...]``.

``-I`` drops the user site and every ``PYTHON*`` variable and keeps the working folder and this script's
folder off ``sys.path``; pdbgym itself is found where it is installed, or else next to this file.
Here ``ROOT`` (the project) is appended to the END of ``sys.path``, so no project module can shadow the
standard library, pytest or pdbgym; pytest, every one of its default plugins, pytest-timeout and the
report plugin are imported before any project code, and the process leaves with ``os._exit`` taken at
start, so exit hooks a project registers never run and cannot change the exit status.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

_exit = os._exit


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -I -B pytest_launch.py ROOT [pytest arguments...]\n")
        return 4
    root, args = os.path.abspath(argv[0]), argv[1:]
    for name in [n for n in os.environ if n.startswith("PYTEST_")]:
        del os.environ[name]  # PYTEST_ADDOPTS, PYTEST_PLUGINS: only the arguments given here count
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.environ["PDBGYM_TEST_ROOT"] = root  # read (and removed) by the report plugin when it loads
    sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != root]
    if importlib.util.find_spec("pdbgym") is None:  # a source checkout, not installed
        sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.path.append(root)
    # pytest and the plugin load only now: after the environment and sys.path above are set, so no
    # autoloaded plugin, PYTEST_ADDOPTS or project module takes part in the run
    import pytest
    from _pytest.config import default_plugins, essential_plugins

    for name in (*essential_plugins, *default_plugins):
        importlib.import_module(f"_pytest.{name}")
    pytest_timeout = importlib.import_module("pytest_timeout")
    from pdbgym.tasks import pytest_report  # reads PDBGYM_TEST_ROOT, set above, when it loads

    plugin = pytest_report.PLUGIN
    # pdbgym's modules leave sys.modules before any project code runs: the plugin is reachable only
    # through pytest, and an import of pdbgym by the project loads a fresh copy that holds nothing.
    for name in [n for n in sys.modules if n == "pdbgym" or n.startswith("pdbgym.")]:
        del sys.modules[name]
    del pytest_report
    return int(pytest.main(args, plugins=[plugin, pytest_timeout]))


if __name__ == "__main__":
    status = main(sys.argv[1:])
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    _exit(status)
