"""The `builtin` suite: hand-written debugging tasks, one bug class each.

These checks read the task folders statically (plus one `git apply` per task on a copy); running
each task's tests for real is the job of `pdbgym tasks validate builtin` and its tests.
"""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

import pytest

from pdbgym.grading.protect import is_protected_path
from pdbgym.tasks.model import Task
from pdbgym.tasks.patches import apply_patch, patched_files
from pdbgym.tasks.suites import SUITES, resolve_tasks

REQUIRED_BUG_CLASSES = {
    "infinite_loop",
    "runtime_state",
    "mutable_shared_state",
    "far_symptom",
    "off_by_one",
    "wrong_exception_handling",
}
MIN_TASKS = 12
# Bounds from the corpus brief: a realistic package, a small suite.
SOURCE_LINES = (60, 250)
TESTS_PER_TASK = (4, 10)
# Added lines shorter than this ("else:", "return x") are too generic to count as a leak.
MIN_LEAK_CHARS = 8

TASKS: list[Task] = resolve_tasks("builtin")
TASK_IDS = [task.instance_id for task in TASKS]


def _repo_files(task: Task, suffix: str = ".py") -> list[Path]:
    return sorted(p for p in task.repo.rglob(f"*{suffix}") if "__pycache__" not in p.parts)


def _source_files(task: Task) -> list[Path]:
    return [p for p in _repo_files(task) if not is_protected_path(str(p.relative_to(task.repo)))]


def _test_functions(test_file: Path) -> set[str]:
    tree = ast.parse(test_file.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test")}


def _patch_lines(patch: str, sign: str) -> list[str]:
    """Stripped '+' (added) or '-' (removed) lines of a unified diff, file headers excluded."""
    header = sign * 3 + " "
    return [line[1:].strip() for line in patch.splitlines() if line.startswith(sign) and not line.startswith(header)]


def test_suite_has_enough_tasks_with_matching_ids() -> None:
    assert len(TASKS) >= MIN_TASKS, f"builtin holds {len(TASKS)} tasks, want at least {MIN_TASKS}"
    for task in TASKS:
        assert task.instance_id == f"builtin__{task.path.name}", f"{task.path}: id must be builtin__<folder name>"
        assert task.path.parent == SUITES["builtin"].resolve()


def test_bug_classes_are_distinct_and_cover_the_required_ones() -> None:
    classes = [task.bug_class for task in TASKS]
    assert None not in classes, "every built-in task names its bug_class"
    duplicates = sorted({c for c in classes if classes.count(c) > 1})
    assert not duplicates, f"bug classes used by more than one task: {duplicates}"
    missing = REQUIRED_BUG_CLASSES - set(classes)
    assert not missing, f"required bug classes without a task: {sorted(missing)}"


def test_metadata_mixes_difficulties_and_names_the_source() -> None:
    assert {task.difficulty for task in TASKS} == {"easy", "medium", "hard"}
    for task in TASKS:
        assert task.source == "handwritten", task.instance_id
        assert task.test_command == "python -m pytest", task.instance_id


@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_node_ids_name_real_tests_and_most_tests_keep_passing(task: Task) -> None:
    assert not set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS), "a test cannot be in both lists"
    assert len(task.PASS_TO_PASS) > len(task.FAIL_TO_PASS), "most tests should be PASS_TO_PASS"
    defined = {
        f"{path}::{name}" for path in task.test_files for name in _test_functions(task.repo / path)
    }
    assert set(task.all_tests) == defined, "FAIL_TO_PASS + PASS_TO_PASS must list exactly the suite's tests"
    on_disk = {str(p.relative_to(task.repo)) for p in task.repo.rglob("test_*.py")}
    assert on_disk == set(task.test_files), f"test files not named by any node id: {on_disk - set(task.test_files)}"
    low, high = TESTS_PER_TASK
    assert low <= len(defined) <= high, f"{len(defined)} tests, want {low}-{high}"


@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_project_is_a_small_realistic_package(task: Task) -> None:
    sources = _source_files(task)
    packages = {p.relative_to(task.repo).parts[0] for p in sources if p.parent != task.repo}
    assert len(packages) == 1, f"want one package at the repo root, found {sorted(packages)}"
    modules = [p for p in sources if p.name != "__init__.py"]
    assert 2 <= len(modules) <= 4, f"want 2-4 modules, found {[p.name for p in modules]}"
    lines = sum(len(p.read_text().splitlines()) for p in sources)
    assert SOURCE_LINES[0] <= lines <= SOURCE_LINES[1], f"{lines} source lines, want {SOURCE_LINES}"
    leftovers = [p for p in task.repo.rglob("*") if p.name in ("__pycache__", ".pytest_cache")]
    assert not leftovers, f"build leftovers committed in repo/: {leftovers}"


@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_repo_imports_only_stdlib_pytest_and_itself(task: Task) -> None:
    own = {p.name for p in task.repo.iterdir() if p.is_dir()} | {p.stem for p in task.repo.glob("*.py")}
    allowed = set(sys.stdlib_module_names) | {"pytest"} | own
    for path in _repo_files(task):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = [node.module.split(".")[0]]
            else:
                continue
            outside = [root for root in roots if root not in allowed]
            assert not outside, f"{path.relative_to(task.repo)} imports {outside}"


@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_patch_fixes_source_only_and_applies(task: Task, tmp_path: Path) -> None:
    touched = patched_files(task.patch)
    assert touched, "the reference patch changes no file"
    protected = [path for path in touched if is_protected_path(path) or path in task.test_files]
    assert not protected, f"the reference patch edits test files: {protected}"
    copy = tmp_path / "repo"
    shutil.copytree(task.repo, copy)
    apply_patch(copy, task.patch)
    for path in touched:
        ast.parse((copy / path).read_text(), filename=path)


@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_problem_statement_describes_the_symptom_not_the_fix(task: Task) -> None:
    statement = task.problem_statement
    assert len(statement) >= 80, "write a problem statement a user would file"
    changed = _patch_lines(task.patch, "+") + _patch_lines(task.patch, "-")
    leaked = [line for line in changed if len(line) >= MIN_LEAK_CHARS and line in statement]
    assert not leaked, f"the statement quotes lines of the patch: {leaked}"
    for path in patched_files(task.patch):
        assert path not in statement, f"the statement names the file to fix ({path})"


def test_helpers_detect_leaks_and_protected_paths() -> None:
    """The checks above would catch a leaking statement and a patch that edits tests."""
    patch = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-    return a + b\n+    return a - b\n"
    assert _patch_lines(patch, "+") == ["return a - b"]
    assert _patch_lines(patch, "-") == ["return a + b"]
    assert is_protected_path("tests/test_mod.py") and not is_protected_path("pkg/mod.py")
