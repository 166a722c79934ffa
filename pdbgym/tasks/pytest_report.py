"""The report plugin of the grading run: each test phase's outcome leaves the process as it is reported.

Registered by ``pdbgym.tasks.pytest_launch`` (as ``PLUGIN``) before pytest starts and before any project
module is imported. At import it opens the result channel (a FIFO whose path ``PDBGYM_RESULT_CHANNEL``
names; the variable is removed and the FIFO unlinked at once), moves it to a private descriptor, and
takes a snapshot of what the verdict depends on: the functions and classes of pytest, ``_pytest``,
pluggy, pytest-timeout and this module, and the builtins. Each record is one JSON line with a sequence
number, written with ``os.write`` as pytest reports it, so nothing the project does later (an exit hook,
a patched ``json``) can take a record back.

The hooks are closures over everything they use (the descriptor, ``os.write``, ``json.dumps``, the
snapshot, even ``str`` and ``getattr``), so replacing a name in this module, in ``os``, ``json`` or in
the builtins changes nothing they do; such a replacement is reported by the self-check. At session end
the plugin checks that snapshot, the hook implementations pytest calls, the collected test functions'
code and the trace hooks, and sends the end record with the exit status and what the check found. A
collection error (a test module that fails to import) is sent as its own record, and so is each
subtest's report (pytest's ``subtests`` fixture, ``unittest``'s ``subTest``), which pytest gives as
one more ``call`` report of its test. The
host (``pdbgym.tasks.verdict``) decides; this file only reports.
"""

from __future__ import annotations

import builtins
import fcntl
import hashlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import pytest

from pdbgym.tasks.protect import is_protected_path, protected_digests

CHANNEL_ENV = "PDBGYM_RESULT_CHANNEL"
ROOT_ENV = "PDBGYM_TEST_ROOT"  # set by the launcher: the project folder whose test files are hashed
_PRIVATE_FD_MIN = 850  # the channel's descriptor lives far above what a project usually opens
_WATCHED_PACKAGES = ("_pytest", "pytest", "pluggy", "pytest_timeout")
_WATCHED_HOOKS = (
    "pytest_runtestloop", "pytest_runtest_protocol", "pytest_runtest_setup", "pytest_runtest_call",
    "pytest_runtest_teardown", "pytest_runtest_makereport", "pytest_runtest_logreport", "pytest_pyfunc_call",
    "pytest_report_teststatus",
)
# Replacements pytest makes itself at configure time: (module, names...) -> (module, attribute) of the
# one function allowed in its place.
_PYTEST_OWN_PATCHES = {
    ("_pytest.config", "Config", "_getini_unknown_type"): ("_pytest.legacypath", "Config__getini_unknown_type"),
}


def _open_channel() -> int | None:
    """The write end of the host's pipe, moved to a private descriptor. The variable holds the number
    this process inherited it at, never a path: nothing of the channel is named where the project
    could replace it."""
    import stat

    number = os.environ.pop(CHANNEL_ENV, None)
    if not number:
        return None
    fd = int(number)
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # a wrong number must not write records into a file
        raise RuntimeError(f"{CHANNEL_ENV}={number} is not the inherited result pipe")
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _PRIVATE_FD_MIN)
    os.close(fd)
    return private


def _subtest_report_types() -> tuple[type, ...]:
    """The report class of subtests: pytest 9 and later report both its ``subtests`` fixture and
    ``unittest``'s ``subTest`` through it. Before pytest 9 there is none, and a failing unittest subtest
    fails its test's own call."""
    try:
        from _pytest.subtests import SubtestReport
    except ImportError:
        return ()
    return (SubtestReport,)


class ReportPlugin:
    """The object registered with pytest: its hooks are the closures :func:`_build` makes, held as instance
    attributes (plain functions, so nothing is looked up through a class when pytest calls them).

    It is hashable (by identity), as pluggy needs: a hook called for a node below a folder with its own
    ``conftest.py`` goes through ``subset_hook_caller``, which keeps the plugins in a set. A
    ``types.SimpleNamespace`` (unhashable) ended such runs in an INTERNALERROR.
    """

    def __init__(self, **hooks: Callable[..., None]) -> None:
        vars(self).update(hooks)


def _build(fd: int | None, root: str | None) -> ReportPlugin:  # noqa: C901 - one closure scope
    """The plugin object; every name its hooks use is bound here, once, before project code runs."""
    write, dumps, getpid = os.write, json.dumps, os.getpid
    modules, builtin_names = sys.modules, vars(builtins)
    gettrace, getprofile = sys.gettrace, sys.getprofile
    abspath, dirname, basename, relpath, sep = (os.path.abspath, os.path.dirname, os.path.basename,
                                                os.path.relpath, os.sep)
    str_, int_, bool_, list_, len_, tuple_ = str, int, bool, list, len, tuple
    getattr_, isinstance_, callable_, vars_, type_ = getattr, isinstance, callable, vars, type
    descriptors = (property, staticmethod, classmethod)
    protected = is_protected_path
    state: dict[str, Any] = {"seq": 0, "phases": 0, "collect_errors": 0, "subtests": 0, "tests": {}, "changed": []}
    sha256, join, isfile = hashlib.sha256, os.path.join, os.path.isfile
    digests = protected_digests(root) if root else {}
    subtest_reports = _subtest_report_types()

    def digest_now(rel: str) -> str | None:
        path = join(root or "", rel)
        if not isfile(path):
            return None
        with open(path, "rb") as handle:
            return sha256(handle.read()).hexdigest()

    def check_files(rels: list[str], when: str) -> None:
        for rel in rels:
            if rel in digests and digest_now(rel) != digests[rel]:
                state["changed"].append(f"test file {rel} changed {when}")

    def send(record: dict[str, Any]) -> None:
        if fd is None:
            return
        record["seq"] = state["seq"]
        state["seq"] += 1
        data = (dumps(record, ensure_ascii=True) + "\n").encode("ascii")
        while data:
            data = data[write(fd, data):]

    def snapshot() -> dict[tuple[str, ...], object]:
        taken: dict[tuple[str, ...], object] = {}
        for name, module in list_(modules.items()):
            if module is None or (name.split(".")[0] not in _WATCHED_PACKAGES and name != __name__):
                continue
            taken[(name,)] = module
            for attr, value in list_(vars_(module).items()):
                if not callable_(value):
                    continue
                taken[(name, attr)] = value
                if isinstance_(value, type_) and value.__module__ == name:
                    for member, item in list_(vars_(value).items()):
                        if callable_(item) or isinstance_(item, descriptors):
                            taken[(name, attr, member)] = item
        for attr, value in list_(builtin_names.items()):
            taken[("builtins", attr)] = value
        return taken

    def current_value(key: tuple[str, ...]) -> object:
        if len_(key) == 1:
            return modules.get(key[0])
        owner: object = builtin_names if key[0] == "builtins" else modules.get(key[0])
        for part in key[1:]:
            if owner is None:
                return None
            owner = (owner if isinstance_(owner, dict) else vars_(owner)).get(part)
        return owner

    def allowed_replacement(key: tuple[str, ...], current: object) -> bool:
        allowed = _PYTEST_OWN_PATCHES.get(key)
        module = modules.get(allowed[0]) if allowed else None
        return module is not None and vars_(module).get(allowed[1]) is current

    def check_snapshot() -> list[str]:
        return [f"{'.'.join(key)} was replaced during the run" for key, value in state["snap"].items()
                if (now := current_value(key)) is not value and not allowed_replacement(key, now)]

    def trusted_dirs() -> tuple[str, ...]:
        dirs = [dirname(abspath(__file__))]
        for name in _WATCHED_PACKAGES:
            module = modules.get(name)
            if module is not None and getattr_(module, "__file__", None):
                dirs.append(dirname(abspath(module.__file__)))
        return tuple_(dirs)

    def check_hooks(session: Any, root: str) -> list[str]:
        trusted, problems = trusted_dirs(), []
        for hook_name in _WATCHED_HOOKS:
            for impl in vars_(session.config.pluginmanager.hook)[hook_name].get_hookimpls():
                filename = abspath(getattr_(getattr_(impl.function, "__code__", None), "co_filename", "?"))
                if filename.startswith(trusted):
                    continue
                if basename(filename) == "conftest.py" and filename.startswith(root + sep):
                    continue
                problems.append(f"hook {hook_name} implemented by untrusted code in {filename}")
        return problems

    def check_tests(root: str) -> list[str]:
        problems = []
        for nodeid, (function, code) in state["tests"].items():
            # Code from outside the tree (a decorator of the standard library or an installed package,
            # like mock.patch) is not the project's; inside it, only test files may hold a test's code.
            filename = abspath(code.co_filename)
            if getattr_(function, "__code__", None) is not code:
                problems.append(f"the code of test {nodeid} was replaced during the run")
            elif filename.startswith(root + sep) and not code.co_filename.startswith("<") \
                    and not protected(relpath(filename, root)):
                problems.append(f"test {nodeid} runs code from {code.co_filename}, not from a test file")
        if gettrace() is not None or getprofile() is not None:
            problems.append("a trace or profile hook was left installed")
        return problems

    @pytest.hookimpl
    def pytest_collection_finish(session: Any) -> None:
        for item in session.items:
            function = getattr_(item, "obj", None)
            code = getattr_(function, "__code__", None)
            if code is not None:
                state["tests"][item.nodeid] = (function, code)
        # Modules pytest imported since load (its lazily loaded parts) are watched from here on too.
        state["snap"] = {**snapshot(), **state["snap"]}

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectstart(collector: Any) -> None:
        # A test module or conftest is read right after this; the project's code may have run since.
        path = str_(getattr_(collector, "path", "") or "")
        if root and path.startswith(root + sep):
            rel = relpath(path, root)
            check_files([rel, join(rel, "conftest.py")], "before pytest read it")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(report: Any) -> None:
        if isinstance_(report, subtest_reports):
            # Each subtest is one more "call" report of its test: sent as its own kind, so the test's own
            # phases stay one record each (the verdict counts a failed subtest against its test).
            state["subtests"] += 1
            send({"kind": "subtest", "nodeid": str_(report.nodeid), "outcome": str_(report.outcome),
                  "xfail": bool_(getattr_(report, "wasxfail", False))})
            return
        state["phases"] += 1
        send({"kind": "phase", "nodeid": str_(report.nodeid), "when": str_(report.when),
              "outcome": str_(report.outcome), "xfail": bool_(getattr_(report, "wasxfail", False))})

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectreport(report: Any) -> None:
        # A test module that fails to import (a syntax error, a name the tests import gone) is an error
        # in pytest's closing line and yields no test phases: its record keeps the two in agreement.
        if report.failed:
            state["collect_errors"] += 1
            send({"kind": "collect", "nodeid": str_(report.nodeid), "outcome": "failed"})

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(session: Any) -> None:
        root = str_(session.config.rootpath)
        check_files(list_(digests), "during the run")
        problems = state["changed"] + check_snapshot() + check_hooks(session, root) + check_tests(root)
        send({"kind": "end", "exitstatus": int_(session.exitstatus), "phases": state["phases"],
              "collect_errors": state["collect_errors"],
              "subtests": state["subtests"], "selfcheck": problems[:20]})

    state["snap"] = snapshot()
    send({"kind": "start", "pid": getpid()})
    return ReportPlugin(pytest_collection_finish=pytest_collection_finish,
                        pytest_collectstart=pytest_collectstart,
                        pytest_collectreport=pytest_collectreport,
                        pytest_runtest_logreport=pytest_runtest_logreport,
                        pytest_sessionfinish=pytest_sessionfinish)


PLUGIN = _build(_open_channel(), os.environ.pop(ROOT_ENV, None))
