"""Run a task's tests inside the sandbox and read per-test outcomes from the report plugin."""

from __future__ import annotations

import json
import shlex
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from pdbgym.sandbox import Limits, Sandbox, sandbox_env
from pdbgym.tasks.model import Task


@dataclass
class SuiteRun:
    """Outcomes of one pytest run. ``outcomes`` maps node id -> passed/failed/error/skipped."""

    outcomes: dict[str, str] = field(default_factory=dict)
    output: str = ""
    timed_out: bool = False
    duration_s: float = 0.0
    returncode: int | None = None

    def passed(self, node: str) -> bool:
        """A test missing from the report (not collected, crashed run, timeout) counts as failed."""
        return self.outcomes.get(node) == "passed"

    def all_passed(self, nodes: list[str]) -> bool:
        return all(self.passed(n) for n in nodes)

    def failing(self, nodes: list[str]) -> list[str]:
        return [n for n in nodes if not self.passed(n)]

    def summary(self, nodes: list[str]) -> str:
        lines = [f"{self.outcomes.get(n, 'missing (counted as failed)'):>8}  {n}" for n in nodes]
        passed = sum(self.passed(n) for n in nodes)
        head = f"{passed}/{len(nodes)} passed"
        if self.timed_out:
            head += " (the run hit its wall-clock limit)"
        return head + "\n" + "\n".join(lines)


def pytest_argv(task: Task, nodes: list[str], python: str = sys.executable) -> list[str]:
    """The pytest command for ``nodes``: the task's test command, our report plugin, a per-test timeout."""
    argv = shlex.split(task.test_command)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = python
    return [
        *argv,
        "-p", "no:cacheprovider",
        "-p", "pdbgym.env.pytest_report",
        "-p", "pytest_timeout",
        f"--timeout={task.test_timeout_s:g}",
        "-q",
        *nodes,
    ]


def run_tests(
    sandbox: Sandbox,
    workspace: Path,
    task: Task,
    nodes: list[str],
    *,
    limits: Limits | None = None,
) -> SuiteRun:
    """Run ``nodes`` in ``workspace`` under ``sandbox``; never raises for test failures or timeouts."""
    report = workspace / f".pdbgym-report-{uuid.uuid4().hex}.json"
    wall = min(600.0, 30.0 + task.test_timeout_s * max(1, len(nodes)))
    limits = limits or Limits(wall_time_s=wall)
    env = sandbox_env(workspace, {"PDBGYM_REPORT": str(report)})
    started = time.perf_counter()
    result = sandbox.run(pytest_argv(task, nodes), workspace, limits, env=env)
    outcomes: dict[str, str] = {}
    try:
        if report.is_file():
            outcomes = json.loads(report.read_text()).get("outcomes", {})
    except (OSError, json.JSONDecodeError):
        outcomes = {}
    finally:
        report.unlink(missing_ok=True)
    return SuiteRun(
        outcomes=outcomes,
        output=result.output,
        timed_out=result.timed_out,
        duration_s=time.perf_counter() - started,
        returncode=result.returncode,
    )
