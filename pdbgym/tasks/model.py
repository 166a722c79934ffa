"""The task format: a folder holding ``task.json`` and ``repo/`` (the buggy project).

This module is the one owner of the format; ``docs/task-format.md`` describes it for people.
Loading validates the folder and names every missing or wrong field.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from pdbgym.errors import PdbgymError, TaskFormatError
from pdbgym.fileio import JSONValue
from pdbgym.grading.subject import test_command_problem
from pdbgym.sandbox.pyenv import check_requirements

TASK_FILE = "task.json"
REPO_DIR = "repo"
DEFAULT_TEST_COMMAND = "python -m pytest"
# An instance id names a folder or a file wherever results are written (``<out>/transcripts/<arm>/<id>/``,
# a task folder under ``--out``, ``<id>.pt`` in a cache): a plain name that cannot climb out of the folder.
INSTANCE_ID_MAX_CHARS = 200  # leaves room below NAME_MAX (255) for the prefixes and suffixes added to it
_INSTANCE_ID = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.-]{{0,{INSTANCE_ID_MAX_CHARS - 1}}}")
INSTANCE_ID_RULE = (f"1 to {INSTANCE_ID_MAX_CHARS} characters of letters, digits, '_', '-' and '.', starting with a "
                    "letter, digit or '_' (no '/', no leading '.', not '.' or '..')")
SPLITS = ("train", "val", "test")
DIFFICULTIES = ("easy", "medium", "hard")

_REQUIRED: dict[str, type] = {
    "instance_id": str,
    "FAIL_TO_PASS": list,
    "PASS_TO_PASS": list,
    "patch": str,
}
_OPTIONAL: dict[str, type] = {
    "test_command": str,
    "problem_statement": str,
    "split": str,
    "source": str,
    "bug_class": str,
    "difficulty": str,
    "test_timeout_s": (int, float),  # type: ignore[dict-item]
    "requirements": list,
}


def instance_id_problem(value: object) -> str | None:
    """Why ``value`` cannot be an instance id (``INSTANCE_ID_RULE``), or None when it can."""
    if not isinstance(value, str):
        return f"field 'instance_id' must be str, got {type(value).__name__}"
    if _INSTANCE_ID.fullmatch(value) is None:
        return f"field 'instance_id' must be {INSTANCE_ID_RULE}; got {value[:80]!r}"
    return None


class TaskJSON(TypedDict):
    """A task's own fields as ``task.json`` holds them (``docs/task-format.md``); optional ones only when set.
    The keys of ``Task.extra`` (``wrong_site``, ``demands``, a source's own) sit beside them."""

    instance_id: str
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    patch: str
    test_command: NotRequired[str]
    problem_statement: NotRequired[str]
    split: NotRequired[str]
    source: NotRequired[str]
    bug_class: NotRequired[str]
    difficulty: NotRequired[str]
    test_timeout_s: NotRequired[float]
    requirements: NotRequired[list[str]]


@dataclass(frozen=True)
class Task:
    """One debugging task. ``path`` is the task folder; ``repo`` is the buggy project inside it."""

    instance_id: str
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    patch: str
    path: Path
    test_command: str = DEFAULT_TEST_COMMAND
    problem_statement: str = ""
    split: str | None = None
    source: str | None = None
    bug_class: str | None = None
    difficulty: str | None = None
    test_timeout_s: float = 10.0
    # Pinned packages the code and tests need (``NAME==VERSION``), built into the task's environment
    # (``pdbgym.sandbox.pyenv``); None: the test runner's packages alone.
    requirements: list[str] | None = None
    extra: dict[str, JSONValue] = field(default_factory=dict)  # task.json's other keys, as written

    def __post_init__(self) -> None:
        # Checked here too, so a Task built in code (not by load_task) cannot carry a path as its id.
        if (problem := instance_id_problem(self.instance_id)) is not None:
            raise TaskFormatError(f"task at {self.path}: {problem}")
        if self.requirements is not None:
            try:
                check_requirements(self.requirements, f"task {self.instance_id!r}: field 'requirements': ")
            except PdbgymError as exc:
                raise TaskFormatError(str(exc)) from exc

    @property
    def repo(self) -> Path:
        return self.path / REPO_DIR

    @property
    def all_tests(self) -> list[str]:
        return [*self.FAIL_TO_PASS, *self.PASS_TO_PASS]

    @property
    def test_files(self) -> list[str]:
        """Repo-relative paths of the files that hold the task's tests (restored before grading)."""
        files = {node.split("::", 1)[0] for node in self.all_tests}
        return sorted(files)

    def statement(self) -> str:
        """What the agent is told: the problem statement, or a default naming the failing tests."""
        if self.problem_statement:
            return self.problem_statement
        tests = ", ".join(self.FAIL_TO_PASS)
        return f"These tests fail and should pass: {tests}. Find the bug in the code and fix it."

    def content_hash(self) -> str:
        """sha256 over the buggy repo's files (path + bytes), for split overlap checks."""
        digest = hashlib.sha256()
        for file in sorted(p for p in self.repo.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(str(file.relative_to(self.repo)).encode())
            digest.update(b"\0")
            digest.update(file.read_bytes())
        return digest.hexdigest()

    def to_json(self) -> TaskJSON:
        """What ``task.json`` holds: the fields set, then the extra keys."""
        data = {k: v for k, v in asdict(self).items() if k not in ("path", "extra")}
        data.update(self.extra)
        return cast(TaskJSON, {k: v for k, v in data.items() if v is not None})


def _check_fields(data: Mapping[str, object], where: Path) -> None:
    problems: list[str] = []
    for name, kind in _REQUIRED.items():
        if name not in data:
            problems.append(f"missing required field '{name}'")
        elif not isinstance(data[name], kind):
            problems.append(f"field '{name}' must be {kind.__name__}, got {type(data[name]).__name__}")
    if isinstance(data.get("instance_id"), str) and (problem := instance_id_problem(data["instance_id"])):
        problems.append(problem)
    for name, kind in _OPTIONAL.items():
        if name in data and data[name] is not None and not isinstance(data[name], kind):
            expected = kind.__name__ if isinstance(kind, type) else "number"
            problems.append(f"field '{name}' must be {expected}, got {type(data[name]).__name__}")
    for name in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        value = data.get(name)
        if isinstance(value, list):
            bad = [v for v in value if not isinstance(v, str) or not v.strip()]
            if bad:
                problems.append(f"field '{name}' must list pytest node ids (strings), found {bad[:3]!r}")
            absolute = [v for v in value if isinstance(v, str) and (v.startswith("/") or ".." in v.split("::")[0])]
            if absolute:
                problems.append(f"field '{name}' node ids must be relative to repo/, found {absolute[:3]!r}")
    if isinstance(command := data.get("test_command"), str) and \
            (problem := test_command_problem(data.get("instance_id"), command)) is not None:
        problems.append(problem)
    if isinstance(data.get("FAIL_TO_PASS"), list) and not data["FAIL_TO_PASS"]:
        problems.append("field 'FAIL_TO_PASS' is empty: a task needs at least one failing test")
    if isinstance(patch := data.get("patch"), str) and "@@" not in patch:
        problems.append("field 'patch' is not a unified diff (no '@@' hunk header)")
    if data.get("split") is not None and data.get("split") not in SPLITS:
        problems.append(f"field 'split' must be one of {SPLITS}, got {data.get('split')!r}")
    if data.get("difficulty") is not None and data.get("difficulty") not in DIFFICULTIES:
        problems.append(f"field 'difficulty' must be one of {DIFFICULTIES}, got {data.get('difficulty')!r}")
    if isinstance(requirements := data.get("requirements"), list):
        try:
            check_requirements(requirements, "field 'requirements': ")
        except PdbgymError as exc:
            problems.append(str(exc).replace("\n", "\n  "))
    if problems:
        listing = "\n  - ".join(problems)
        raise TaskFormatError(f"{where}: invalid task.json:\n  - {listing}\nSee docs/task-format.md.")


def load_task(path: str | Path) -> Task:
    """Load and validate one task folder (or its task.json)."""
    folder = Path(path)
    if folder.name == TASK_FILE:
        folder = folder.parent
    task_file = folder / TASK_FILE
    if not folder.is_dir():
        raise TaskFormatError(f"{folder}: no such task folder")
    if not task_file.is_file():
        raise TaskFormatError(f"{folder}: no {TASK_FILE} (a task is a folder with task.json and repo/)")
    if not (folder / REPO_DIR).is_dir():
        raise TaskFormatError(f"{folder}: no {REPO_DIR}/ folder holding the buggy project")
    try:
        data = json.loads(task_file.read_text())
    except json.JSONDecodeError as exc:
        raise TaskFormatError(f"{task_file}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise TaskFormatError(f"{task_file}: must hold a JSON object")
    _check_fields(data, task_file)
    known = set(_REQUIRED) | set(_OPTIONAL)
    extra = {k: v for k, v in data.items() if k not in known}
    fields = {k: v for k, v in data.items() if k in known and v is not None}
    missing_files = [f for f in {n.split("::", 1)[0] for n in data["FAIL_TO_PASS"] + data["PASS_TO_PASS"]}
                     if not (folder / REPO_DIR / f).is_file()]
    if missing_files:
        raise TaskFormatError(f"{task_file}: test files named in FAIL_TO_PASS/PASS_TO_PASS are not in repo/: "
                              f"{sorted(missing_files)}")
    return Task(path=folder.resolve(), extra=extra, **fields)


def write_task(task_dir: Path, data: Mapping[str, object]) -> None:
    """Write task.json atomically (the repo/ folder is the caller's): a ``TaskJSON``'s fields and any extra keys,
    checked here before anything is written."""
    _check_fields(data, task_dir / TASK_FILE)
    task_dir.mkdir(parents=True, exist_ok=True)
    tmp = task_dir / (TASK_FILE + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(task_dir / TASK_FILE)
