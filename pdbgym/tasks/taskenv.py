"""A task's sandbox: the given one with the task's environment mounted (docs/task-format.md, "requirements");
and a task's pdb session, run as its graded run is (``task_session``).

A task that declares ``requirements`` gets its environment from the cache (``pdbgym.sandbox.pyenv``),
built first when missing: the only step that reaches the network, on the host, before any command of
the task runs. A task without them gets the runner environment (pytest alone) under bwrap.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pdbgym.debugger import PdbSession
from pdbgym.errors import SandboxError
from pdbgym.grading.layout import package_folders
from pdbgym.grading.subject import pytest_options
from pdbgym.sandbox import Sandbox
from pdbgym.sandbox.pyenv import EnvironmentInfo, ensure_environment
from pdbgym.sandbox.zygote import Zygote
from pdbgym.tasks.model import Task


def task_environment(task: Task, on_line: Callable[[str], None] | None = None) -> EnvironmentInfo | None:
    """The built environment of ``task`` (None when it declares no requirements)."""
    if not task.requirements:
        return None
    return ensure_environment(task.requirements, on_line)


def task_sandbox(sandbox: Sandbox, task: Task, on_line: Callable[[str], None] | None = None) -> Sandbox:
    """``sandbox`` with ``task``'s environment mounted; ``EnvironmentBuildError`` naming the requirement
    and the installer's message when it cannot be built; ``SandboxError`` when the backend cannot mount it."""
    if task.requirements and not sandbox.mounts_environments:
        raise SandboxError(f"task {task.instance_id!r} declares requirements, which the {sandbox.name} sandbox "
                           "cannot mount; run it under bwrap")
    info = task_environment(task, on_line)
    wanted = info.site_packages if info is not None else None
    return sandbox if sandbox.site_packages == wanted else sandbox.with_site_packages(wanted)


def task_session(task: Task, sandbox: Sandbox, workspace: Path, node: str | None = None, *,
                 command_timeout_s: float = 10.0, zygote: Zygote | None = None) -> PdbSession:
    """A pdb session on ``node`` (the task's first FAIL_TO_PASS test) in ``workspace``, started with the
    task's own pytest options and with its package folders (a src layout) first on the path, as the
    graded run has them, so ``continue`` reaches the failure the grading run sees. ``command_timeout_s`` and
    ``zygote`` as ``PdbSession`` takes them."""
    return PdbSession(sandbox, workspace, node or task.FAIL_TO_PASS[0],
                      pytest_args=pytest_options(task.test_command) or [],
                      import_roots=package_folders(str(task.repo)), command_timeout_s=command_timeout_s,
                      zygote=zygote)
