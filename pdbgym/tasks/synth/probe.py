"""A pytest plugin, loaded into the project's test process with ``-p pdbgym.tasks.synth.probe``.

It writes one JSON file (path in ``PDBGYM_PROBE_OUT``) with every test's outcome and duration, and,
when ``PDBGYM_PROBE_ROOT`` is set, which functions under that folder each test called. Coverage is
function-level (a code object counts when it is entered), collected with ``sys.setprofile`` so it
needs no third-party package; functions entered before the first test starts (at import or
collection time) are listed apart under ``import_time``, since a bug there reaches every test.

This module runs inside the project's interpreter, so it imports nothing from pdbgym.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from types import CodeType, FrameType

import pytest

OUT_ENV = "PDBGYM_PROBE_OUT"
ROOT_ENV = "PDBGYM_PROBE_ROOT"
TIMEOUTS_ENV = "PDBGYM_PROBE_TIMEOUTS"  # JSON file {node id: seconds}: per-test timeouts for those tests
STOP_ENV = "PDBGYM_PROBE_STOP_ON_TIMEOUT"  # "1": stop the session at the first test that times out
# JSON file [node id, ...]: run exactly these of the collected tests. pytest's own ``--deselect`` matches
# node id prefixes (deselecting ``test_merge`` drops ``test_merge_with`` too), and naming hundreds of
# node ids on the command line costs more than running the tests.
SELECT_ENV = "PDBGYM_PROBE_SELECT"
# "1": leave the process as soon as pytest starts unconfiguring (the report is written, the summary
# printed). Set for runs in a fork-server child, which needs no tidy interpreter shutdown: it spares
# pytest's end-of-run garbage collections, a good part of a small run's cost.
FAST_EXIT_ENV = "PDBGYM_PROBE_FAST_EXIT"

_outcomes: dict[str, str] = {}
_durations: dict[str, float] = {}
_coverage: dict[str, list[str]] = {}
_entered: set[CodeType] = set()
_import_time: list[str] = []
_collect_errors: list[str] = []
_tracing_root: str | None = None
_first_test_seen = False


def _profile(frame: FrameType, event: str, arg: object) -> None:
    if event == "call":
        _entered.add(frame.f_code)


def _start_profiling() -> None:
    _entered.clear()
    sys.setprofile(_profile)
    threading.setprofile(_profile)


def _stop_profiling() -> list[str]:
    sys.setprofile(None)
    threading.setprofile(None)  # type: ignore[arg-type]
    keys: set[str] = set()
    assert _tracing_root is not None
    for code in _entered:
        filename = code.co_filename
        if filename.startswith(_tracing_root) and code.co_name != "<module>":
            rel = os.path.relpath(filename, _tracing_root)
            keys.add(f"{rel}:{code.co_firstlineno}")
    _entered.clear()
    return sorted(keys)


def pytest_configure(config: pytest.Config) -> None:
    # Read here, not at import: a forked test server imports this module once, before any job's env.
    global _tracing_root
    _tracing_root = os.environ.get(ROOT_ENV) or None
    if _tracing_root:
        _start_profiling()


def set_timeouts(items: list[pytest.Item], timeouts: dict[str, float]) -> None:
    """Give the listed items their own pytest-timeout limit (a marker overrides ``--timeout``)."""
    for item in items:
        if item.nodeid in timeouts:
            item.add_marker(pytest.mark.timeout(timeouts[item.nodeid]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selection = os.environ.get(SELECT_ENV)
    if selection:
        wanted = set(json.loads(Path(selection).read_text()))
        dropped = [item for item in items if item.nodeid not in wanted]
        if dropped:
            items[:] = [item for item in items if item.nodeid in wanted]
            config.hook.pytest_deselected(items=dropped)
    path = os.environ.get(TIMEOUTS_ENV)
    if path:
        set_timeouts(items, json.loads(Path(path).read_text()))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _collect_errors.append(f"{report.nodeid}: {report.longreprtext[-2000:]}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    global _first_test_seen
    if _tracing_root:
        if not _first_test_seen:
            _import_time.extend(_stop_profiling())
        _start_profiling()
    _first_test_seen = True
    started = time.perf_counter()
    yield
    _durations[item.nodeid] = round(time.perf_counter() - started, 4)
    if _tracing_root:
        _coverage[item.nodeid] = _stop_profiling()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # A subtest (pytest's ``subtests`` fixture, ``unittest``'s ``subTest``) is one more "call" report of
    # its test: a failed one sticks, as in grading's verdict (``pdbgym.grading.verdict``), even when the
    # test's own call report passes later.
    previous = _outcomes.get(report.nodeid)
    if previous in ("failed", "error", "timeout"):
        return
    if report.failed:
        text = report.longreprtext
        if "from pytest-timeout" in text or "Failed: Timeout >" in text:
            _outcomes[report.nodeid] = "timeout"
            if os.environ.get(STOP_ENV) == "1":
                _stop_session("a test timed out")
        else:
            _outcomes[report.nodeid] = "failed" if report.when == "call" else "error"
    elif report.skipped and report.when in ("setup", "call"):
        _outcomes[report.nodeid] = "skipped"
    elif report.when == "call" and report.passed:
        _outcomes[report.nodeid] = "passed"


_session: pytest.Session | None = None


def pytest_sessionstart(session: pytest.Session) -> None:
    global _session
    _session = session


def _stop_session(reason: str) -> None:
    if _session is not None:
        _session.shouldstop = reason


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _tracing_root:
        sys.setprofile(None)
    out = os.environ.get(OUT_ENV)
    if not out:
        return
    payload = {
        "outcomes": _outcomes,
        "durations": _durations,
        "coverage": _coverage,
        "import_time": _import_time,
        "collect_errors": _collect_errors,
        "exitstatus": int(exitstatus),
    }
    target = Path(out)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(payload))
    tmp.replace(target)
    _exit_status.append(int(exitstatus))


_exit_status: list[int] = []  # the session's exit status, once the report is written


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if os.environ.get(FAST_EXIT_ENV) == "1" and _exit_status:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status[-1])
