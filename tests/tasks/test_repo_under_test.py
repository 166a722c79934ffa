"""The repo under test is what runs: grading, the agent's test runs and the pdb session import the task's
repo ahead of any installed copy of the project, find a src layout's package where the project's own
packaging files say it is, run the task's own pytest options, and validation names the file when a
project module still comes from elsewhere.

Each case is a real task validated, graded and debugged through bubblewrap. Environments are built by the
offline installer of ``envfixtures``; ``FAKE_RELEASED`` makes it also install a released copy of the
project (``calc`` with the bug already fixed), as a test dependency that requires the project would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdbgym.grading.grader import grade
from pdbgym.grading.layout import import_roots, package_folders
from pdbgym.sandbox import Workspace, get_sandbox
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason
from pdbgym.tasks.model import load_task
from pdbgym.tasks.patches import apply_patch
from pdbgym.tasks.taskenv import task_sandbox, task_session
from pdbgym.tasks.validate import validate_task

from envfixtures import use_fake_installer
from taskfixtures import PATCH, make_task

pytestmark = pytest.mark.skipif(bwrap_unavailable_reason() is not None, reason="bubblewrap cannot run here")
FIXED_OPS = "def add(a, b):\\n    return a + b\\n\\n\\ndef sub(a, b):\\n    return a - b\\n"


@pytest.fixture
def released_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_installer(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_RELEASED", f"calc:{FIXED_OPS}")


def _moved_to(root: Path, folder: str) -> None:
    """Move the tiny task's ``calc`` package under ``folder`` (a src layout) and its patch with it."""
    repo = root / "repo"
    (repo / folder).mkdir(parents=True)
    (repo / "calc").rename(repo / folder / "calc")
    data = json.loads((root / "task.json").read_text())
    data["patch"] = PATCH.replace("calc/ops.py", f"{folder}/calc/ops.py")
    (root / "task.json").write_text(json.dumps(data))


def _graded(task, fixed: bool):
    sandbox = task_sandbox(get_sandbox("bwrap"), task)
    with Workspace.create(task.repo) as ws:
        if fixed:
            apply_patch(ws.path, task.patch)
        return grade(task, ws.path, sandbox)


def _continued(task) -> tuple[int | None, str]:
    """pytest's exit status and output when the first FAIL_TO_PASS test is continued under pdb."""
    sandbox = task_sandbox(get_sandbox("bwrap"), task)
    with Workspace.create(task.repo) as ws, task_session(task, sandbox, ws.path) as session:
        session.start()
        reply = session.send("c", timeout_s=60)
    return reply.exit_status, reply.output


def test_a_released_copy_in_the_environment_never_stands_in_for_the_repo(tmp_path, released_copy):
    """Before: the repo came last on sys.path, the released (fixed) copy was imported, the FAIL_TO_PASS test
    passed on the buggy repo and the breakpoint in the repo never hit."""
    task = load_task(make_task(tmp_path / "task", requirements=["calc-testing-helpers==1.0"]))
    report = validate_task(task)
    assert report.ok, report.problems
    assert report.checks["tests_import_the_repo"] and report.checks["pdb_reaches_the_failure"]
    assert not _graded(task, fixed=False).final_test_passed
    assert _graded(task, fixed=True).final_test_passed
    status, output = _continued(task)
    assert status == 1 and "assert 8 == 2" in output, output[-800:]


@pytest.mark.parametrize("declared", [True, False], ids=["package-dir declared", "src by convention"])
def test_a_src_layout_is_imported_from_its_folder(tmp_path, released_copy, declared):
    """Before: only the repo's root was on sys.path, so the project's conftest and tests failed with
    ModuleNotFoundError (or, with a released copy installed, imported that)."""
    root = make_task(tmp_path / "task", requirements=["calc-testing-helpers==1.0"])
    _moved_to(root, "src")
    if declared:
        (root / "repo" / "pyproject.toml").write_text('[tool.setuptools.package-dir]\n"" = "src"\n')
    task = load_task(root)
    assert package_folders(str(task.repo)) == ["src"]
    report = validate_task(task)
    assert report.ok, report.problems
    assert not _graded(task, fixed=False).final_test_passed
    assert _graded(task, fixed=True).final_test_passed
    assert _continued(task)[0] == 1


def test_the_pdb_session_runs_with_the_tasks_own_options(tmp_path):
    """A conftest the task's ``test_command`` leaves out (``--noconftest``): before, the session ran without
    the option, its conftest raised at import and ``continue`` ended in an error, not the failure."""
    root = make_task(tmp_path / "task", test_command="python -m pytest --noconftest -p no:warnings")
    (root / "repo" / "tests" / "conftest.py").write_text("raise RuntimeError('needs a plugin the task does not have')\n")
    task = load_task(root)
    report = validate_task(task)
    assert report.ok, report.problems
    status, output = _continued(task)
    assert status == 1 and "RuntimeError" not in output, output[-800:]


def test_validation_names_the_file_when_the_tests_import_another_copy(tmp_path, released_copy):
    """A layout the packaging files do not declare (``code/calc``, found by pytest through ``-o pythonpath``
    only in the task's own runs, not here): the tests import the released copy, and validation says which
    file they imported instead of passing the task."""
    root = make_task(tmp_path / "task", requirements=["calc-testing-helpers==1.0"])
    _moved_to(root, "code")
    task = load_task(root)
    assert import_roots(str(task.repo)) == [str(task.repo)]
    report = validate_task(task, check_debugger=False)
    assert not report.ok and report.checks["tests_import_the_repo"] is False
    assert any("from outside the repo" in p and "/pdbgym-env/calc/" in p for p in report.problems), report.problems


def test_import_roots_read_the_packaging_files_and_stay_inside(tmp_path):
    repo = tmp_path / "repo"
    for folder in ("src/pkg", "lib/pkg", "py/pkg"):
        (repo / folder).mkdir(parents=True)
        (repo / folder / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text('[tool.setuptools.packages.find]\nwhere = ["lib", "../outside", "/etc"]\n')
    (repo / "setup.cfg").write_text("[options]\npackage_dir =\n    =py\n")
    (repo / "setup.py").write_text("setup(package_dir={'': 'src'})\n")
    assert package_folders(str(repo)) == ["lib", "py", "src"]
    (repo / "linked").symlink_to(repo / "src")
    (repo / "pyproject.toml").write_text('[tool.setuptools.package-dir]\n"" = "linked"\n')
    (repo / "setup.cfg").unlink()
    (repo / "setup.py").unlink()
    assert package_folders(str(repo)) == []  # a link is never followed; declared, so no guess either
