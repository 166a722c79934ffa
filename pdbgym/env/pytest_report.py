"""A pytest plugin that writes each test's outcome to a JSON file, so grading never parses console text.

Loaded inside the sandbox with ``-p pdbgym.env.pytest_report``; the output path comes from the
``PDBGYM_REPORT`` environment variable. A test is "passed" only when every phase passed (an error in
setup or teardown fails it); tests that never ran are absent, and graders count absence as failure.

The project under test runs in this process, so it could forge the report. The easy ways are closed:
the path is taken out of the environment when this plugin loads, before any project module, and the
report is written by an exit hook registered at that moment. Exit hooks run last-registered first, so
every hook a project module registers runs before ours (our write wins), and ours ends the process
(``os._exit``), so hooks registered at interpreter start-up (a ``sitecustomize.py``) never run.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path

_outcomes: dict[str, str] = {}
_target = os.environ.pop("PDBGYM_REPORT", None)
_exitstatus: list[int] = []


def pytest_runtest_logreport(report) -> None:  # noqa: ANN001 - pytest hook signature
    previous = _outcomes.get(report.nodeid)
    if report.failed:
        _outcomes[report.nodeid] = "failed" if report.when == "call" else "error"
    elif report.skipped and previous is None:
        _outcomes[report.nodeid] = "skipped"
    elif report.when == "call" and report.passed and previous in (None, "passed"):
        _outcomes[report.nodeid] = "passed"


def pytest_sessionfinish(session, exitstatus) -> None:  # noqa: ANN001
    _exitstatus.append(int(exitstatus))


def _write_report_and_exit() -> None:
    if not _target or not _exitstatus:  # no session ran (a usage error): nothing to report
        return
    path = Path(_target)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"outcomes": _outcomes, "exitstatus": _exitstatus[-1]}))
    tmp.replace(path)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(_exitstatus[-1])


atexit.register(_write_report_and_exit)
