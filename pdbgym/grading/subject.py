"""What grading needs of a task, and how a task's ``test_command`` becomes the options of the graded run.

Grading sits below the task format (``pdbgym.tasks``): it takes any object with these fields, so the trust
boundary can be read without the task model, and ``pdbgym.tasks`` (validation, synthesis) can use the
graded runner without a circle.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Protocol

# What ``test_command`` may start with: grading runs pytest itself and takes only the options that follow.
TEST_COMMAND_PREFIXES = (("python", "-m", "pytest"), ("python3", "-m", "pytest"), ("pytest",))
TEST_COMMAND_SHAPE = "'python -m pytest [options]' (or 'python3 -m pytest [options]', 'pytest [options]')"


class GradedTask(Protocol):
    """A task as grading sees it (``pdbgym.tasks.model.Task`` is one)."""

    instance_id: str
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    test_command: str
    test_timeout_s: float

    @property
    def repo(self) -> Path: ...

    @property
    def all_tests(self) -> list[str]: ...


def pytest_options(command: str) -> list[str] | None:
    """The pytest options of ``command`` when it has the accepted shape (``TEST_COMMAND_SHAPE``), else None
    (another program, a shell pipeline, unbalanced quotes)."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    for prefix in TEST_COMMAND_PREFIXES:
        if tuple(argv[: len(prefix)]) == prefix:
            return argv[len(prefix):]
    return None


def test_command_problem(instance_id: object, command: str) -> str | None:
    """Why ``command`` cannot be a task's ``test_command`` (naming the task), or None when it can."""
    if pytest_options(command) is not None:
        return None
    return (f"task {instance_id!r}: field 'test_command' must run pytest as {TEST_COMMAND_SHAPE}, got "
            f"{command!r}; grading starts pytest itself and keeps only the options after it")
