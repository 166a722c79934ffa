"""The `regression` suite: tasks where the place a debugger first stops is the wrong place to fix.

The slow checks run each task's own tests for real: a fresh copy of ``repo/`` per run, patches
applied with ``git apply``, pytest inside the project's sandbox. The traceback check reads pytest's
short tracebacks: the innermost frame outside the test files is where the exception was raised,
which is where a post-mortem debugger lands first. The reference fix must lie elsewhere, and a
task's ``wrong_site_patch`` (the tempting fix at that frame) must make FAIL_TO_PASS pass while
breaking exactly the PASS_TO_PASS tests it lists in ``wrong_site_breaks``.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from pdbgym.grading.testrun import SuiteRun, run_tests
from pdbgym.sandbox import Sandbox, Workspace, get_sandbox
from pdbgym.tasks.model import TASK_FILE, Task, load_task
from pdbgym.tasks.patches import apply_patch, parse_patch
from pdbgym.tasks.suites import SUITES, find_task_dirs, resolve_tasks

BUG_CLASSES = ("far_symptom", "upstream_cause", "symptom_fix_breaks_contract")
TASK_DIRS = find_task_dirs(SUITES["regression"])
WRONG_SITE_DIRS = [d for d in TASK_DIRS if "wrong_site_patch" in json.loads((d / TASK_FILE).read_text())]

Site = tuple[str, str]  # (repo-relative file, name of the innermost enclosing function or "<module>")

_FRAME = re.compile(r"^(?P<path>\S+\.py):(?P<line>\d+): in \S+$", re.MULTILINE)
_FAILURE_HEADER = re.compile(r"^_{3,} (?P<test>\S+) _{3,}$", re.MULTILINE)


def _ids(dirs: list[Path]) -> list[str]:
    return [d.name for d in dirs]


def _repo_relative(path: str, task: Task) -> str | None:
    """The repo-relative file a traceback path names (relative already, or absolute under a mount)."""
    parts = Path(path).parts
    for start in range(1 if Path(path).is_absolute() else 0, len(parts)):
        candidate = Path(*parts[start:])
        if (task.repo / candidate).is_file():
            return candidate.as_posix()
    return None


def raise_sites(output: str, task: Task) -> dict[str, Site | None]:
    """Failed test name -> innermost traceback frame in the task's own code (test files excluded).

    None means the exception came from the test itself (a failed assert), not from the code.

    ``output`` is pytest console output run with ``--tb=short``: one section per failed test, one
    ``path:line: in function`` line per frame, innermost last. The function is located from the
    line with ``ast`` (as for patches), so a comprehension counts as the function that holds it.
    """
    headers = list(_FAILURE_HEADER.finditer(output))
    sites: dict[str, Site | None] = {}
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(output)
        code_frames = []
        for frame in _FRAME.finditer(output, header.end(), end):
            relative = _repo_relative(frame["path"], task)
            if relative is not None and relative not in task.test_files:
                tree = ast.parse((task.repo / relative).read_text())
                code_frames.append((relative, _enclosing_function(tree, int(frame["line"]))))
        sites[header["test"]] = code_frames[-1] if code_frames else None
    return sites


def _enclosing_function(tree: ast.Module, line: int) -> str:
    """Name of the innermost function whose body spans ``line`` (1-based), else "<module>"."""
    best: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.lineno <= line <= node.end_lineno:
            if best is None or node.lineno >= best.lineno:
                best = node
    return best.name if best is not None else "<module>"


def patched_sites(patch: str, repo: Path) -> set[Site]:
    """(file, function) of every line ``patch`` changes, located in the unpatched ``repo``.

    A pure insertion belongs to the line just above it (e.g. new statements after a docstring).
    """
    sites: set[Site] = set()
    for hunk in parse_patch(patch):
        first, last, _ = hunk.changed_span()
        tree = ast.parse((repo / hunk.path).read_text())
        lines = range(first, last + 1) if last >= first else [max(first - 1, 1)]
        sites |= {(hunk.path, _enclosing_function(tree, line)) for line in lines}
    return sites


def run_on_copy(task: Task, sandbox: Sandbox, nodes: list[str], patch: str | None = None) -> SuiteRun:
    """Run ``nodes`` (short tracebacks) on a fresh copy of the task's repo, ``patch`` applied first."""
    short_tracebacks = dataclasses.replace(task, test_command=f"{task.test_command} --tb=short")
    with Workspace.create(task.repo) as workspace:
        if patch is not None:
            apply_patch(workspace.path, patch)
        return run_tests(sandbox, workspace.path, short_tracebacks, nodes)


def _buggy_failing_run(task: Task, sandbox: Sandbox) -> SuiteRun:
    return run_on_copy(task, sandbox, task.FAIL_TO_PASS)


def _wrong_site_run(task: Task, sandbox: Sandbox) -> SuiteRun:
    return run_on_copy(task, sandbox, task.all_tests, patch=task.extra["wrong_site_patch"])


# The sandboxed run each slow test needs, by test function name.
_RUNS: dict[str, Callable[[Task, Sandbox], SuiteRun]] = {
    "test_exception_is_raised_away_from_the_fix": _buggy_failing_run,
    "test_wrong_site_patch_passes_failing_tests_but_breaks_its_contract": _wrong_site_run,
}


@pytest.fixture(scope="module")
def suite_runs(request: pytest.FixtureRequest) -> Iterator[dict[tuple[str, str], Future[SuiteRun]]]:
    """The runs of every selected slow test in this module, started together.

    Keyed by (test function name, task folder name). The work is in subprocesses, so a few
    threads keep every core busy and cut the wall time of the module roughly by the core count.
    """
    sandbox = get_sandbox()
    wanted = [(item.originalname, item.callspec.params["task_dir"]) for item in request.session.items
              if item.module is request.module and item.originalname in _RUNS and hasattr(item, "callspec")]
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 2)) as pool:
        yield {(name, task_dir.name): pool.submit(_RUNS[name], load_task(task_dir), sandbox)
               for name, task_dir in wanted}


def test_suite_has_enough_distinct_tasks():
    tasks = resolve_tasks("regression")
    assert len(tasks) >= 8
    for task in tasks:
        assert task.instance_id == f"regression__{task.path.name}"
        assert task.source == "handwritten-regression"
        assert task.bug_class in BUG_CLASSES, f"{task.instance_id}: bug_class {task.bug_class!r}"
    assert {task.bug_class for task in tasks} == set(BUG_CLASSES)
    assert len({task.content_hash() for task in tasks}) == len(tasks)


@pytest.mark.parametrize("task_dir", TASK_DIRS, ids=_ids(TASK_DIRS))
def test_task_shape(task_dir: Path):
    task = load_task(task_dir)
    modules = [p for p in task.repo.rglob("*.py")
               if "tests" not in p.relative_to(task.repo).parts and p.name != "__init__.py"]
    code_lines = sum(len(p.read_text().splitlines()) for p in modules)
    assert 3 <= len(modules) <= 5 and 80 <= code_lines <= 300, f"{len(modules)} modules, {code_lines} lines"
    assert 5 <= len(task.all_tests) <= 12
    assert not set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS)
    fixed_sites = patched_sites(task.patch, task.repo)
    assert not any(path.startswith("tests/") for path, _ in fixed_sites), "the reference patch edits tests"
    named = [function for _, function in fixed_sites if re.search(rf"\b{re.escape(function)}\b", task.statement())]
    assert not named, f"the problem statement names the function to fix: {named}"


@pytest.mark.parametrize("task_dir", TASK_DIRS, ids=_ids(TASK_DIRS))
def test_wrong_site_fields_are_consistent(task_dir: Path):
    task = load_task(task_dir)
    if task.bug_class == "symptom_fix_breaks_contract":
        assert "wrong_site_patch" in task.extra, "this bug class needs a wrong_site_patch to prove it"
    if "wrong_site_patch" in task.extra:
        breaks = task.extra.get("wrong_site_breaks")
        assert breaks and set(breaks) <= set(task.PASS_TO_PASS), f"wrong_site_breaks {breaks!r}"
        assert patched_sites(task.extra["wrong_site_patch"], task.repo).isdisjoint(
            patched_sites(task.patch, task.repo))


def test_patched_sites_reads_functions_from_the_unpatched_file():
    task = load_task(SUITES["regression"] / "cost-split-rounding")
    assert patched_sites(task.patch, task.repo) == {("costsplit/allocation.py", "split_cents")}
    # The wrong-site patch only inserts lines, right under Ledger.post's docstring.
    assert patched_sites(task.extra["wrong_site_patch"], task.repo) == {("costsplit/ledger.py", "post")}


@pytest.mark.slow
@pytest.mark.parametrize("task_dir", TASK_DIRS, ids=_ids(TASK_DIRS))
def test_exception_is_raised_away_from_the_fix(task_dir: Path, suite_runs: dict, request: pytest.FixtureRequest):
    task = load_task(task_dir)
    run = suite_runs[(request.node.originalname, task_dir.name)].result()
    sites = raise_sites(run.output, task)
    assert sorted(sites) == sorted(node.split("::")[-1] for node in task.FAIL_TO_PASS), run.output
    in_code = {test: site for test, site in sites.items() if site is not None}
    assert task.FAIL_TO_PASS[0].split("::")[-1] in in_code, f"the first failing test must raise in the code:\n{run.output}"
    fixed_sites = patched_sites(task.patch, task.repo)
    assert not set(in_code.values()) & fixed_sites, f"exceptions raised at {in_code}, the fix edits {fixed_sites}"
    if "wrong_site_patch" in task.extra:
        wrong_sites = patched_sites(task.extra["wrong_site_patch"], task.repo)
        assert set(in_code.values()) <= wrong_sites, f"raised at {in_code}; the wrong-site patch edits {wrong_sites}"


@pytest.mark.slow
@pytest.mark.parametrize("task_dir", WRONG_SITE_DIRS, ids=_ids(WRONG_SITE_DIRS))
def test_wrong_site_patch_passes_failing_tests_but_breaks_its_contract(
    task_dir: Path, suite_runs: dict, request: pytest.FixtureRequest
):
    task = load_task(task_dir)
    run = suite_runs[(request.node.originalname, task_dir.name)].result()
    assert run.all_passed(task.FAIL_TO_PASS), run.summary(task.FAIL_TO_PASS)
    broken = set(run.failing(task.PASS_TO_PASS))
    assert broken == set(task.extra["wrong_site_breaks"]), run.summary(task.PASS_TO_PASS)
