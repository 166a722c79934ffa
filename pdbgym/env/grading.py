"""Grading: run the task's tests afresh with the original test files restored.

Edits to tests never count: grading builds a separate tree from the task's pristine repo and overlays
only the agent's changes to non-test files. Solved means every FAIL_TO_PASS and every PASS_TO_PASS test
passed; a test missing from the run counts as failed.
"""

from __future__ import annotations

import filecmp
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pdbgym.env.testrun import run_tests
from pdbgym.sandbox import Sandbox
from pdbgym.sandbox.environment import SANDBOX_HOME_DIR
from pdbgym.tasks.model import Task

_TEST_DIR_NAMES = {"tests", "test", "testing"}
_TEST_CONFIG_FILES = {"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "noxfile.py"}


def is_protected_path(rel_path: str) -> bool:
    """True for files whose agent edits grading ignores: tests, conftest and test configuration."""
    path = PurePosixPath(rel_path)
    name = path.name
    if name in _TEST_CONFIG_FILES:
        return True
    if name.startswith("test_") or name.endswith("_test.py"):
        return True
    return any(part in _TEST_DIR_NAMES for part in path.parts[:-1])


def _files(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".pdbgym-")
        and p.relative_to(root).parts[0] != SANDBOX_HOME_DIR
    }


def changed_source_files(task: Task, workspace: Path) -> tuple[list[str], list[str]]:
    """Non-test files the agent changed or created, and those it deleted (repo-relative)."""
    original, current = _files(task.repo), _files(workspace)
    changed = [
        f for f in sorted(current)
        if not is_protected_path(f) and (f not in original or not filecmp.cmp(task.repo / f, workspace / f, shallow=False))
    ]
    deleted = [f for f in sorted(original - current) if not is_protected_path(f)]
    return changed, deleted


@dataclass
class GradeResult:
    """The outcome of grading. ``final_test_passed`` is the reward; nothing the agent says changes it."""

    final_test_passed: bool
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    pass_to_pass: dict[str, str] = field(default_factory=dict)
    changed_files: list[str] = field(default_factory=list)
    output: str = ""
    timed_out: bool = False
    duration_s: float = 0.0

    def to_dict(self) -> dict:
        return {
            "final_test_passed": self.final_test_passed,
            "FAIL_TO_PASS": self.fail_to_pass,
            "PASS_TO_PASS": self.pass_to_pass,
            "changed_files": self.changed_files,
            "timed_out": self.timed_out,
            "duration_s": round(self.duration_s, 3),
            "output": self.output,
        }


def grade(task: Task, workspace: Path, sandbox: Sandbox) -> GradeResult:
    """Grade the agent's workspace against the task's pristine tests."""
    started = time.perf_counter()
    changed, deleted = changed_source_files(task, workspace)
    with tempfile.TemporaryDirectory(prefix="pdbgym-grade-") as tmp:
        tree = Path(tmp) / "repo"
        shutil.copytree(task.repo, tree, ignore=shutil.ignore_patterns("__pycache__"))
        for rel in changed:
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(workspace / rel, tree / rel)
        for rel in deleted:
            (tree / rel).unlink(missing_ok=True)
        run = run_tests(sandbox, tree, task, task.all_tests)
    outcome = {n: run.outcomes.get(n, "missing") for n in task.all_tests}
    return GradeResult(
        final_test_passed=run.all_passed(task.all_tests),
        fail_to_pass={n: outcome[n] for n in task.FAIL_TO_PASS},
        pass_to_pass={n: outcome[n] for n in task.PASS_TO_PASS},
        changed_files=changed + [f"(deleted) {f}" for f in deleted],
        output=run.output,
        timed_out=run.timed_out,
        duration_s=time.perf_counter() - started,
    )
