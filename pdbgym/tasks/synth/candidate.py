"""Work done per candidate bug, in pool workers: run the mutant's tests, then build and validate a task.

Both steps take and return plain data so they can run in a process pool and be saved in the state file.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pdbgym.errors import PdbgymError
from pdbgym.sandbox import get_sandbox
from pdbgym.tasks.model import REPO_DIR, Task, load_task, write_task
from pdbgym.tasks.patches import apply_patch
from pdbgym.tasks.synth.hotserver import narrowed
from pdbgym.tasks.synth.operators import MutationError, MutationSite
from pdbgym.tasks.synth.project import is_test_file
from pdbgym.tasks.synth.runner import (
    NOT_PASSED,
    PASSED,
    copy_bytecode,
    hot_runner,
    project_requirements,
    read_source,
    run_pytest,
    write_mutant,
)
from pdbgym.tasks.synth.splice import render_mutation
from pdbgym.tasks.validate import validate_task

# Operators whose bugs do not announce themselves (no crash, plausible values): harder to localize.
SUBTLE_OPERATORS = {"wrong_variable", "off_by_one", "boundary_comparison", "removed_assignment", "wrong_return"}


@dataclass
class CandidateResult:
    """What testing one mutant showed. ``status``: flipped, no_flip, timeout, unrendered, uncovered."""

    key: str
    operator: str
    status: str
    failing: list[str] = field(default_factory=list)
    description: str = ""
    seconds: float = 0.0
    executor: str = ""  # "hot" (code swapped in a collected session) or "files" (mutant written, fresh import)
    changed: list[str] | None = None  # hot, its module re-executed: the names whose value changed


@dataclass
class BuildResult:
    """Outcome of writing and validating one task; ``status`` is "kept" or why it was rejected."""

    key: str
    status: str
    instance_id: str = ""
    reason: str = ""


def estimate_difficulty(failing_count: int, operator: str) -> str:
    """easy / medium / hard from how loudly the bug shows: fewer failing tests and a subtle operator
    (no crash, a plausible wrong value) make it harder. Score = (2 if 1 failing test, 1 if 2-3) +
    (1 if subtle operator); 0-1 easy, 2 medium, 3 hard."""
    score = (2 if failing_count == 1 else 1 if failing_count <= 3 else 0) + (operator in SUBTLE_OPERATORS)
    return "easy" if score <= 1 else "medium" if score == 2 else "hard"


def instance_id_for(slug: str, site: MutationSite) -> str:
    return f"{slug}__{site.operator}-{hashlib.sha1(site.key.encode()).hexdigest()[:10]}"


def source_module_of(relpath: str) -> str:
    """Dotted module name of a repo-relative file: ``toolz/itertoolz.py`` -> ``toolz.itertoolz``."""
    parts = list(Path(relpath).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _copy_project(root: Path, dest: Path, keep_tests: set[str] | None = None) -> None:
    """Copy ``root`` to ``dest``; with ``keep_tests`` only those test modules are kept."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n.startswith(".") or n == "__pycache__"}
        if keep_tests is not None:
            rel_folder = Path(folder).relative_to(root)
            skipped |= {n for n in names if is_test_file(n) and (rel_folder / n).as_posix() not in keep_tests}
        return skipped

    shutil.copytree(root, dest, ignore=ignore)


def evaluate_candidate(project_root: str, scratch: str, site: MutationSite, tests: list[str] | None,
                       baseline_passing: list[str], per_test_timeout_s: float,
                       server_root: str | None = None, hot_import_time: list[str] | None = None,
                       timeouts: dict[str, float] | None = None, narrowing: dict | None = None) -> CandidateResult:
    """Render the mutant, run ``tests`` (None: the whole suite) on it, report which passing tests broke.

    With ``server_root`` (a folder holding ``scratch``) a run from files forks this worker's warm,
    sandboxed pytest server rooted there instead of starting an interpreter. With ``hot_import_time``
    too (the functions the clean suite ran at import time), the mutant is first tried in this worker's
    hot server (:mod:`hotserver`: one function's code swapped in an already collected session) and run
    from files only when it cannot be applied that way. ``timeouts`` (per test, see
    :meth:`Baseline.hang_timeouts`) replace ``per_test_timeout_s`` for the tests they list; either way
    the run stops at the first test that times out, and the mutant is rejected. ``narrowing`` (a
    function run at import time, see :meth:`Baseline.narrowing`): when the hot server re-executes the
    mutated module, only the tests that can see the names it changed run, and only they count."""
    started = time.perf_counter()
    root = Path(project_root)
    try:
        mutation = render_mutation(read_source(root / site.file), site)
    except MutationError as exc:
        return CandidateResult(site.key, site.operator, "unrendered", description=str(exc))
    wall = _wall_budget(len(tests or baseline_passing), per_test_timeout_s)
    run, executor = None, "hot"
    if tests is not None and server_root is not None and hot_import_time is not None:
        runner = hot_runner(root, Path(server_root), per_test_timeout_s, hot_import_time)
        run = runner.try_mutant(site.file, mutation.source, tests, timeouts or {}, wall, narrowing) if runner else None
    if run is None:
        executor = "files"
        with tempfile.TemporaryDirectory(dir=scratch, prefix="mutant-") as tmp:
            workspace = Path(tmp) / "ws"
            _copy_project(root, workspace)
            copy_bytecode(root, workspace)
            write_mutant(workspace / site.file, mutation.source)
            run = run_pytest(workspace, tests, per_test_timeout_s=per_test_timeout_s, wall_time_s=wall,
                             server_root=Path(server_root) if server_root else None, timeouts=timeouts,
                             stop_on_timeout=True)
    watched = tests if tests is not None else baseline_passing
    if run.changed is not None and narrowing:
        watched = narrowed(watched, narrowing, run.changed)
    elapsed = time.perf_counter() - started
    if run.timed_out or any(run.outcome(t) == "timeout" for t in watched):
        return CandidateResult(site.key, site.operator, "timeout", description=mutation.description, seconds=elapsed,
                               executor=executor, changed=run.changed)
    failing = sorted(t for t in watched if run.outcome(t) in NOT_PASSED)
    status = "flipped" if failing else "no_flip"
    return CandidateResult(site.key, site.operator, status, failing, mutation.description, elapsed, executor,
                           run.changed)


def _wall_budget(test_count: int, per_test_timeout_s: float) -> float:
    return min(600.0, 60.0 + test_count * 0.5 + 2 * per_test_timeout_s)


def reference_patch(relpath: str, buggy: str, clean: str) -> str:
    """The fix as a git-style unified diff (``a/`` ``b/`` prefixes) from the buggy text back to the clean
    one. The validation applies it with ``git apply``, so a malformed patch can never be kept."""
    def lines(text: str) -> list[str]:
        out = re.findall(r"[^\n]*\n|[^\n]+$", text)  # git's lines end at \n only (not \x0c, \r, ...)
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n\\ No newline at end of file\n"
        return out

    return f"diff --git a/{relpath} b/{relpath}\n--- a/{relpath}\n+++ b/{relpath}\n" + "".join(
        _minimal_hunks(lines(buggy), lines(clean)))


def _hunk_range(start: int, stop: int) -> str:
    """A unified diff's ``start,length`` for the 0-based half-open span [start, stop)."""
    length = stop - start
    return f"{start + 1}" if length == 1 else f"{start + (1 if length else 0)},{length}"


def _minimal_hunks(old: list[str], new: list[str], context: int = 3) -> Iterator[str]:
    """``difflib.unified_diff``'s hunks without its autojunk heuristic: in a file of 200 lines or more,
    lines repeated often (blank lines, docstring rulers) count as junk, and a one-line mutant of a
    file holding two similar functions came out as a 318-line patch, inflating the task's demands."""
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        yield f"@@ -{_hunk_range(group[0][1], group[-1][2])} +{_hunk_range(group[0][3], group[-1][4])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in old[i1:i2])
                continue
            yield from ("-" + line for line in old[i1:i2])
            yield from ("+" + line for line in new[j1:j2])


def build_task(project_root: str, label: str, slug: str, staging: str, site: MutationSite, failing: list[str],
               baseline_passing: list[str], per_test_timeout_s: float, server_root: str | None = None,
               recheck_fixed: bool = False, reaching: list[str] | None = None) -> BuildResult:
    """Write the task folder under ``staging`` and validate it from its files: FAIL_TO_PASS fail and
    PASS_TO_PASS pass on the buggy repo with no timeouts, and ``git apply`` of the patch gives back the
    clean project's files byte for byte (with ``recheck_fixed`` the listed tests are also run again on
    the patched repo). Only the listed tests run (pytest is given their files; the probe keeps exactly
    them), so the clean suite's flaky and failing tests never do.

    ``reaching`` (the covering path: the tests that can observe the mutated function, as the candidate
    run selected them): the buggy repo runs FAIL_TO_PASS and the PASS_TO_PASS tests among them, and the
    others are shown to pass on the task's clean files instead, by one run per distinct file layout
    (:func:`layout_problem`), which is also the patched repo. Without it every listed test runs on the
    buggy repo, and the patched repo is the clean project's files, whose suite passed every baseline run.
    Last, the written folder must pass the grader's own check (:func:`graded_problem`)."""
    root = Path(project_root)
    instance_id = instance_id_for(slug, site)
    task_dir = Path(staging) / instance_id
    shutil.rmtree(task_dir, ignore_errors=True)
    try:
        mutation = render_mutation(read_source(root / site.file), site)
    except MutationError as exc:
        return BuildResult(site.key, "unrendered", instance_id, str(exc))
    test_files = sorted({node.split("::", 1)[0] for node in failing})
    failing_set = set(failing)
    still_passing = [t for t in baseline_passing if t.split("::", 1)[0] in test_files and t not in failing_set]
    if not still_passing:
        return BuildResult(site.key, "no_passing_left", instance_id, "every test in the failing files broke")
    _copy_project(root, task_dir / REPO_DIR, keep_tests=set(test_files))
    write_mutant(task_dir / REPO_DIR / site.file, mutation.source)
    patch = reference_patch(site.file, mutation.source, read_source(root / site.file))
    data = {
        "instance_id": instance_id, "FAIL_TO_PASS": failing, "PASS_TO_PASS": still_passing, "patch": patch,
        "source": label, "bug_class": site.operator, "difficulty": estimate_difficulty(len(failing), site.operator),
        "test_timeout_s": per_test_timeout_s, "mutated_file": site.file, "mutated_function": site.function,
        "mutated_line": site.line, "source_module": source_module_of(site.file), "mutation": mutation.description,
        "mutation_key": site.key,
    }
    if requirements := project_requirements():  # the environment the task was kept in, recorded whole
        data["requirements"] = requirements
    server = Path(server_root) if server_root else None
    checked = still_passing if reaching is None else sorted(set(still_passing).intersection(reaching))
    problem = "" if reaching is None else layout_problem(root, test_files, [*failing, *still_passing],
                                                         per_test_timeout_s, server)
    problem = problem or _validate_folder(task_dir, root, failing, checked, patch, per_test_timeout_s, server,
                                          recheck_fixed)
    if problem:
        shutil.rmtree(task_dir, ignore_errors=True)
        return BuildResult(site.key, "invalid", instance_id, problem)
    try:
        write_task(task_dir, data)
        problem = graded_problem(load_task(task_dir))
    except PdbgymError as exc:
        problem = str(exc)
    if problem:
        shutil.rmtree(task_dir, ignore_errors=True)
        return BuildResult(site.key, "invalid", instance_id, problem)
    return BuildResult(site.key, "kept", instance_id)


def graded_problem(task: Task) -> str:
    """An empty string when ``pdbgym tasks validate`` (without its debugger check) passes the written task,
    else its problems.

    The runs above read outcomes through the synthesis probe, in a fork of a warm pytest: fast, and they
    see timeouts. This one is the grader's own: the hardened run and its verdict (``grading/testrun.py``,
    ``grading/verdict.py``) on every listed test, buggy and patched. So synthesis keeps only tasks that
    grading and ``tasks validate`` judge the same way, whatever the two runs differ in (the import mode,
    the plugin's self-check, the verdict's rules)."""
    report = validate_task(task, get_sandbox("auto"), check_debugger=False)
    return "" if report.ok else "pdbgym tasks validate: " + "; ".join(report.problems)[:1500]


_layouts: dict[tuple, str] = {}  # this process's layout checks: (root, test files, tests) -> problem


def layout_problem(root: Path, test_files: list[str], tests: list[str], per_test_timeout_s: float,
                   server_root: Path | None) -> str:
    """An empty string when ``tests`` (every stable-passing test of ``test_files``) pass in a clean copy
    of the project that holds only those test files, as a task folder does, else what is wrong. Tasks
    share few layouts, so each is run once per process and remembered."""
    key = (str(root), tuple(test_files), tuple(sorted(tests)))
    if key not in _layouts:
        with tempfile.TemporaryDirectory(dir=server_root, prefix="layout-") as tmp:
            workspace = Path(tmp) / "ws"
            _copy_project(root, workspace, keep_tests=set(test_files))
            copy_bytecode(root, workspace)
            run = run_pytest(workspace, tests, per_test_timeout_s=per_test_timeout_s,
                             wall_time_s=_wall_budget(len(tests), per_test_timeout_s), server_root=server_root)
        broken = [t for t in tests if run.outcome(t) != PASSED]
        _layouts[key] = (f"in the task's clean files (its test files alone) these tests do not pass: {broken[:5]}"
                         if run.timed_out or broken else "")
    return _layouts[key]


def _validate_folder(task_dir: Path, project_root: Path, failing: list[str], passing: list[str], patch: str,
                     per_test_timeout_s: float, server_root: Path | None, recheck_fixed: bool) -> str:
    """An empty string when the task behaves as claimed on the tests ``failing`` and ``passing``, else
    what is wrong."""
    tests = [*failing, *passing]
    wall = _wall_budget(len(tests), per_test_timeout_s)
    listed = set(tests)
    with tempfile.TemporaryDirectory(dir=task_dir.parent, prefix=".check-") as tmp:
        workspace = Path(tmp) / "ws"
        shutil.copytree(task_dir / REPO_DIR, workspace)
        copy_bytecode(project_root, workspace)
        buggy = run_pytest(workspace, tests, per_test_timeout_s=per_test_timeout_s,
                           wall_time_s=wall, server_root=server_root)
        if buggy.timed_out or listed.intersection(buggy.timeouts()):
            return "a test timed out on the buggy repo"
        wrong = [t for t in failing if buggy.outcome(t) == PASSED] + [t for t in passing if buggy.outcome(t) != PASSED]
        if wrong:
            return f"on the buggy repo these tests did not behave as listed: {wrong[:5]}"
        try:  # the one safe applier: git's repository discovery would skip paths inside a git work tree
            apply_patch(workspace, patch)
        except PdbgymError as exc:
            return f"the reference patch does not apply: {str(exc)[:300]}"
        differing = _files_differing_from(workspace, project_root)
        if differing:
            return f"the patched repo is not the clean project: {differing[:5]} differ"
        if recheck_fixed:
            fixed = run_pytest(workspace, tests, per_test_timeout_s=per_test_timeout_s, wall_time_s=wall,
                               server_root=server_root)
            still_broken = [t for t in tests if fixed.outcome(t) != PASSED]
            if fixed.timed_out or still_broken:
                return f"after the reference patch these tests still fail: {still_broken[:5]}"
    return ""


def _files_differing_from(workspace: Path, clean_root: Path) -> list[str]:
    """Files of ``workspace`` (caches and hidden files aside) whose bytes are not the clean project's."""
    differing = []
    for path in sorted(workspace.rglob("*")):
        rel = path.relative_to(workspace)
        if not path.is_file() or "__pycache__" in rel.parts or any(p.startswith(".") for p in rel.parts):
            continue
        clean = clean_root / rel
        if not clean.is_file() or clean.read_bytes() != path.read_bytes():
            differing.append(rel.as_posix())
    return differing
