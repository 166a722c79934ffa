"""Named suites and task discovery: ``builtin``, ``regression``, a task folder or a folder of tasks."""

from __future__ import annotations

from pathlib import Path

from pdbgym.errors import TaskFormatError
from pdbgym.tasks.model import TASK_FILE, Task, load_task

_PACKAGE_DIR = Path(__file__).resolve().parent
SUITES: dict[str, Path] = {
    "builtin": _PACKAGE_DIR / "builtin",
    "regression": _PACKAGE_DIR / "regression",
}


def find_task_dirs(root: Path) -> list[Path]:
    """Task folders at or below ``root`` (a folder holding task.json is not searched further)."""
    if (root / TASK_FILE).is_file():
        return [root]
    found: list[Path] = []
    for child in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        found.extend(find_task_dirs(child))
    return found


def _builtin_by_id(task_id: str) -> Task | None:
    """A packaged task by instance id (``builtin__name``) or by its folder name."""
    suite, _, name = task_id.partition("__")
    if name and suite in SUITES and (SUITES[suite] / name / TASK_FILE).is_file():
        return load_task(SUITES[suite] / name)
    for suite_root in SUITES.values():
        if (suite_root / task_id / TASK_FILE).is_file():
            return load_task(suite_root / task_id)
    return None


def resolve_tasks(spec: str | Path) -> list[Task]:
    """Tasks named by a suite name, a task id of a built-in suite, or a path (every one must load)."""
    tasks, errors = resolve_tasks_lenient(spec)
    if errors:
        raise errors[0][1]
    return tasks


def resolve_tasks_lenient(spec: str | Path) -> tuple[list[Task], list[tuple[Path, TaskFormatError]]]:
    """Like ``resolve_tasks``, but a task folder that does not load is returned as an error, not raised."""
    text = str(spec)
    if text in SUITES:
        root = SUITES[text]
    else:
        root = Path(text)
        if not root.exists():
            found = _builtin_by_id(text)
            if found is not None:
                return [found], []
            raise TaskFormatError(
                f"'{text}' is neither a suite ({', '.join(SUITES)}), a built-in task id, nor an existing path"
            )
    dirs = find_task_dirs(root) if root.is_dir() else []
    if not dirs:
        raise TaskFormatError(f"{root}: no task folders (folders holding {TASK_FILE}) found")
    tasks: list[Task] = []
    errors: list[tuple[Path, TaskFormatError]] = []
    for folder in dirs:
        try:
            tasks.append(load_task(folder))
        except TaskFormatError as exc:
            errors.append((folder, exc))
    seen: dict[str, Path] = {}
    for task in tasks:
        if task.instance_id in seen:
            raise TaskFormatError(
                f"duplicate instance_id '{task.instance_id}' in {seen[task.instance_id]} and {task.path}"
            )
        seen[task.instance_id] = task.path
    return tasks, errors


def resolve_task(spec: str | Path) -> Task:
    tasks = resolve_tasks(spec)
    if len(tasks) != 1:
        raise TaskFormatError(f"'{spec}' names {len(tasks)} tasks; give one task id or task folder")
    return tasks[0]
