"""The report plugin of the grading run: each test phase's outcome leaves the process as it is reported.

Loaded by ``pdbgym.tasks.pytest_launch`` before pytest starts and before any project module is imported.
At import it opens the result channel (a FIFO whose path ``PDBGYM_RESULT_CHANNEL`` names; the variable is
removed and the FIFO unlinked at once), moves it to a private descriptor, and takes a snapshot of what
the verdict depends on: the functions and classes of pytest, ``_pytest``, pluggy and pytest-timeout, and
the builtins. Each record is one JSON line with a sequence number, written with ``os.write`` as pytest
reports it, so nothing the project does later (an exit hook, a patched ``json``) can take a record back.

At session end the plugin checks that snapshot, the hook implementations pytest will call, the collected
test functions' code and the trace hooks, and sends the end record with the exit status and what the
check found. The host (``pdbgym.tasks.testrun``) decides; this file only reports.
"""

from __future__ import annotations

import builtins
import json
import os
import sys
from typing import Any

import pytest

CHANNEL_ENV = "PDBGYM_RESULT_CHANNEL"
_PRIVATE_FD_MIN = 850  # the channel's descriptor lives far above what a project usually opens
_WATCHED_PACKAGES = ("_pytest", "pytest", "pluggy", "pytest_timeout")
_WATCHED_HOOKS = (
    "pytest_runtestloop", "pytest_runtest_protocol", "pytest_runtest_setup", "pytest_runtest_call",
    "pytest_runtest_teardown", "pytest_runtest_makereport", "pytest_runtest_logreport", "pytest_pyfunc_call",
    "pytest_report_teststatus", "pytest_sessionfinish", "pytest_collection_modifyitems",
)

_write = os.write
_dumps = json.dumps
_getattr, _isinstance, _callable, _vars, _id = getattr, isinstance, callable, vars, id


def _open_channel() -> int | None:
    path = os.environ.pop(CHANNEL_ENV, None)
    if not path:
        return None
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    private = __import__("fcntl").fcntl(fd, __import__("fcntl").F_DUPFD_CLOEXEC, _PRIVATE_FD_MIN)
    os.close(fd)
    try:
        os.unlink(path)
    except OSError:
        pass
    return private


def _snapshot() -> dict[tuple[str, ...], object]:
    """Every function and class of the watched packages (and their classes' members), and the builtins."""
    taken: dict[tuple[str, ...], object] = {}
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in _WATCHED_PACKAGES:
            continue
        taken[(name,)] = module
        for attr, value in list(_vars(module).items()):
            if not _callable(value):
                continue
            taken[(name, attr)] = value
            if _isinstance(value, type) and value.__module__ == name:
                for member, item in list(_vars(value).items()):
                    if _callable(item) or _isinstance(item, (property, staticmethod, classmethod)):
                        taken[(name, attr, member)] = item
    for attr, value in list(_vars(builtins).items()):
        taken[("builtins", attr)] = value
    return taken


def _trusted_dirs() -> tuple[str, ...]:
    dirs = [os.path.dirname(os.path.abspath(__file__))]
    for name in _WATCHED_PACKAGES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            dirs.append(os.path.dirname(os.path.abspath(module.__file__)))
    return tuple(dirs)


_fd = _open_channel()
_seq = [0]
_phases = [0]
_snap = _snapshot()
_tests: dict[str, tuple[Any, Any]] = {}


def _send(record: dict[str, Any]) -> None:
    if _fd is None:
        return
    record["seq"] = _seq[0]
    _seq[0] += 1
    data = (_dumps(record, ensure_ascii=True) + "\n").encode("ascii")
    while data:
        data = data[_write(_fd, data):]


_send({"kind": "start", "pid": os.getpid()})


def pytest_collection_finish(session) -> None:  # noqa: ANN001 - pytest hook signature
    global _snap
    for item in session.items:
        function = getattr(item, "obj", None)
        code = getattr(function, "__code__", None)
        if code is not None:
            _tests[item.nodeid] = (function, code)
    # Modules pytest imported since load (its lazily loaded parts) are watched from here on too.
    _snap = {**_snapshot(), **_snap}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report) -> None:  # noqa: ANN001
    _phases[0] += 1
    _send({"kind": "phase", "nodeid": str(report.nodeid), "when": str(report.when),
           "outcome": str(report.outcome), "xfail": bool(getattr(report, "wasxfail", False))})



# Replacements pytest makes itself at configure time: (module, names...) -> (module, attribute) of the
# one function allowed in its place.
_PYTEST_OWN_PATCHES = {
    ("_pytest.config", "Config", "_getini_unknown_type"): ("_pytest.legacypath", "Config__getini_unknown_type"),
}


def _allowed_replacement(key: tuple[str, ...], current: object) -> bool:
    allowed = _PYTEST_OWN_PATCHES.get(key)
    if allowed is None:
        return False
    module = sys.modules.get(allowed[0])
    return module is not None and _vars(module).get(allowed[1]) is current


def _check_snapshot() -> list[str]:
    problems = []
    for key, value in _snap.items():
        if len(key) == 1:
            current = sys.modules.get(key[0])
        elif key[0] == "builtins":
            current = _vars(builtins).get(key[1])
        else:
            owner = sys.modules.get(key[0])
            for part in key[1:-1]:
                owner = _vars(owner).get(part) if owner is not None else None
            current = _vars(owner).get(key[-1]) if owner is not None else None
        if current is not value and not _allowed_replacement(key, current):
            problems.append(f"{'.'.join(key)} was replaced during the run")
    return problems


def _check_hooks(session) -> list[str]:  # noqa: ANN001
    trusted = _trusted_dirs()
    root = str(session.config.rootpath)
    problems = []
    for hook_name in _WATCHED_HOOKS:
        for impl in session.config.pluginmanager.hook.__dict__[hook_name].get_hookimpls():
            code = getattr(impl.function, "__code__", None)
            filename = os.path.abspath(getattr(code, "co_filename", "?"))
            if filename.startswith(trusted):
                continue
            if os.path.basename(filename) == "conftest.py" and filename.startswith(root + os.sep):
                continue
            problems.append(f"hook {hook_name} implemented by untrusted code in {filename}")
    return problems


def _check_tests() -> list[str]:
    problems = []
    for nodeid, (function, code) in _tests.items():
        if getattr(function, "__code__", None) is not code:
            problems.append(f"the code of test {nodeid} was replaced during the run")
        elif os.path.basename(code.co_filename) != os.path.basename(nodeid.split("::", 1)[0]):
            problems.append(f"test {nodeid} runs code from {code.co_filename}, not its test file")
    if sys.gettrace() is not None or sys.getprofile() is not None:
        problems.append("a trace or profile hook was left installed")
    return problems


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session) -> None:  # noqa: ANN001
    problems = _check_snapshot() + _check_hooks(session) + _check_tests()
    _send({"kind": "end", "exitstatus": int(session.exitstatus), "phases": _phases[0],
           "selfcheck": problems[:20]})

