"""Start pytest for a task's tests in an isolated interpreter: ``python -I -B .../pdbgym/grading/launch.py
ROOT [pytest arguments...]``.

``-I`` drops the user site and every ``PYTHON*`` variable and keeps the working folder and this script's
folder off ``sys.path``; pdbgym itself is found where it is installed, or else next to this file.
While pytest, every one of its default plugins, pytest-timeout and the report plugin are imported,
``ROOT`` (the project) is at the END of ``sys.path``, so no project module can stand in for them; then,
before any project code runs, the project's import roots (``pdbgym.grading.layout``: the root, and a
src layout's or ``package-dir``'s folder) move ahead of the task's environment, after the standard
library, so the repo's code is what the tests import even when a released copy of the project is
installed beside it. The process leaves with ``os._exit`` taken at start, so exit hooks a project
registers never run and cannot change the exit status.

The three steps (``prepare``, ``import_runner``, ``run``) are also what a child of the pytest fork server
(``pdbgym.grading.server``) does: the server imports the runner once, each forked child prepares and runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

_exit = os._exit
ROOT_ENV = "PDBGYM_TEST_ROOT"  # read (and removed) by the report plugin when it is built
# Where Python (and pytest's assertion rewriter) look for and write bytecode once the runner is imported:
# a path that can never exist (nothing can be created below a character device), so every module of the
# project and its tests is compiled from its source, never read from a ``.pyc`` someone left.
NO_BYTECODE = "/dev/null/pdbgym-no-bytecode"


def prepare(root: str) -> None:
    """The environment and ``sys.path`` of a run in ``root``: no ``PYTEST_*`` variable, no plugin
    autoloading, the project last on ``sys.path``. Before any import that could read them."""
    for name in [n for n in os.environ if n.startswith("PYTEST_")]:
        del os.environ[name]  # PYTEST_ADDOPTS, PYTEST_PLUGINS: only the arguments given here count
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.environ[ROOT_ENV] = root
    sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != root]
    if importlib.util.find_spec("pdbgym") is None:  # a source checkout, not installed
        sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.path.append(root)


def import_pytest() -> None:
    """Import pytest and every plugin of its own, as each run's configuration would: what a fork server
    (this package's, and synthesis's ``pdbgym.tasks.synth.zygote``) imports once to spare its children.
    pytest's plugins are part of it, never assertion-rewritten, so importing them early changes no run."""
    # pytest loads only now, after ``prepare`` (or in a fork server, before any run): see the module doc
    import pytest  # noqa: F401
    from _pytest.config import default_plugins, essential_plugins

    for name in (*essential_plugins, *default_plugins):
        importlib.import_module(f"_pytest.{name}")


def import_runner() -> ModuleType:
    """``import_pytest``, then pytest-timeout and the report plugin's module (which builds nothing on
    import); returns pytest-timeout. Never imports project code."""
    import_pytest()
    importlib.import_module("pdbgym.grading.plugin")
    return importlib.import_module("pytest_timeout")


def run(args: list[str]) -> int:
    """Build the report plugin from the environment ``prepare`` set, drop pdbgym from ``sys.modules`` and
    run pytest with ``args``; returns its exit status."""
    import pytest  # imported by import_runner already; bound here by name (this module loads without it)

    pytest_timeout = importlib.import_module("pytest_timeout")
    from pdbgym.grading import plugin as report  # its plugin reads ROOT_ENV and the channel when built

    root = os.environ.get(ROOT_ENV)
    if root:
        # pdbgym is importable only once ``prepare`` set sys.path (this file runs as a script), and the
        # runner must be imported before the project's folders move ahead of the environment.
        from pdbgym.grading import layout

        layout.put_first(layout.import_roots(root), sys.path)
    plugin = report.plugin_from_env()
    # pdbgym's modules leave sys.modules before any project code runs: the plugin is reachable only
    # through pytest, and an import of pdbgym by the project loads a fresh copy that holds nothing.
    for name in [n for n in sys.modules if n == "pdbgym" or n.startswith("pdbgym.")]:
        del sys.modules[name]
    del report
    sys.dont_write_bytecode = True
    sys.pycache_prefix = NO_BYTECODE
    return int(pytest.main(args, plugins=[plugin, pytest_timeout]))


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -I -B launch.py ROOT [pytest arguments...]\n")
        return 4
    root, args = os.path.abspath(argv[0]), argv[1:]
    prepare(root)
    # pytest and the plugin load only now: after the environment and sys.path above are set, so no
    # autoloaded plugin, PYTEST_ADDOPTS or project module takes part in the run
    import_runner()
    return run(args)


def flush_and_exit(status: int) -> None:
    """Flush what pytest printed and leave with the ``os._exit`` taken at start: no exit hook runs."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    _exit(status)


if __name__ == "__main__":
    flush_and_exit(main(sys.argv[1:]))
