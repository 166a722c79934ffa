"""A pytest plugin that writes each test's outcome to a JSON file, so grading never parses console text.

Loaded inside the sandbox with ``-p pdbgym.env.pytest_report``; the output path comes from the
``PDBGYM_REPORT`` environment variable. A test is "passed" only when every phase passed (an error in
setup or teardown fails it); tests that never ran are absent, and graders count absence as failure.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

_outcomes: dict[str, str] = {}


def pytest_runtest_logreport(report) -> None:  # noqa: ANN001 - pytest hook signature
    previous = _outcomes.get(report.nodeid)
    if report.failed:
        _outcomes[report.nodeid] = "failed" if report.when == "call" else "error"
    elif report.skipped and previous is None:
        _outcomes[report.nodeid] = "skipped"
    elif report.when == "call" and report.passed and previous in (None, "passed"):
        _outcomes[report.nodeid] = "passed"


def pytest_sessionfinish(session, exitstatus) -> None:  # noqa: ANN001
    target = os.environ.get("PDBGYM_REPORT")
    if not target:
        return
    path = Path(target)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"outcomes": _outcomes, "exitstatus": int(exitstatus)}))
    tmp.replace(path)
