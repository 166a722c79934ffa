"""A task may pin its own pytest (7.x to 9.x): its environment holds that pytest and no pin of pdbgym's
conflicts with it; validation, grading (with its plugin, guard and forgery checks) and the pdb session run
under it. Environments are built with pip from the package index this machine reaches (skipped, saying so,
when it cannot)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pdbgym.grading.grader import grade
from pdbgym.sandbox import Workspace, get_sandbox
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason
from pdbgym.sandbox.pyenv import (
    EnvironmentBuildError,
    check_requirements,
    ensure_environment,
    runner_pins_for,
)
from pdbgym.tasks.model import load_task
from pdbgym.tasks.patches import apply_patch
from pdbgym.tasks.taskenv import task_sandbox, task_session
from pdbgym.tasks.validate import validate_task

from gitfixtures import published_row
from taskfixtures import make_task

needs_bwrap = pytest.mark.skipif(bwrap_unavailable_reason() is not None, reason=str(bwrap_unavailable_reason()))
FORCE_PASS = textwrap.dedent("""
    import gc as _gc

    class _ForcePass:
        def pytest_runtest_makereport(self, item, call):
            pass

    for _obj in _gc.get_objects():
        if type(_obj).__name__ == "Config" and hasattr(_obj, "pluginmanager"):
            _obj.pluginmanager.register(_ForcePass(), "force")
            break
""")


def test_a_task_pinning_pytest_gets_no_pin_of_pdbgyms_beside_it():
    pins = runner_pins_for(check_requirements(["pytest==8.3.5"]))
    assert not any(pin.startswith("pytest==") for pin in pins) and any(p.startswith("pytest-timeout==") for p in pins)
    assert any(pin.startswith("pytest==") for pin in runner_pins_for([]))


@pytest.mark.parametrize("pin", ["pytest==6.2.5", "pytest==10.0.0"])
def test_a_pytest_outside_the_supported_range_is_refused_naming_it(pin):
    with pytest.raises(EnvironmentBuildError, match=r"pytest 7\.x to 9\.x \(>=7\.0,<10\)"):
        check_requirements([pin])


def _environment(pin: str) -> None:
    try:
        ensure_environment([pin])
    except EnvironmentBuildError as exc:
        if "No matching distribution" in str(exc) or "connection" in str(exc).lower():
            pytest.skip(f"the package index is not reachable here: {str(exc)[:200]}")
        raise


@pytest.mark.slow
@needs_bwrap
@pytest.mark.parametrize("version", ["7.4.4", "8.3.5"])
def test_validation_grading_and_the_session_run_under_the_tasks_own_pytest(tmp_path: Path, version: str):
    _environment(f"pytest=={version}")
    root = make_task(tmp_path / "task", requirements=[f"pytest=={version}"])
    (root / "repo" / "tests" / "test_version.py").write_text(
        f"import pytest\n\n\ndef test_runs_under_its_own_pytest():\n    assert pytest.__version__ == {version!r}\n")
    task = load_task(root)
    task.PASS_TO_PASS.append("tests/test_version.py::test_runs_under_its_own_pytest")
    report = validate_task(task)
    assert report.ok, report.problems
    sandbox = task_sandbox(get_sandbox("bwrap"), task)
    results = {}
    for name in ("unfixed", "fixed", "forged"):
        with Workspace.create(task.repo) as ws:
            if name != "unfixed":
                apply_patch(ws.path, task.patch)
            if name == "forged":
                init = ws.path / "calc" / "__init__.py"
                init.write_text(init.read_text() + FORCE_PASS)
            results[name] = grade(task, ws.path, sandbox)
    assert not results["unfixed"].final_test_passed
    assert results["fixed"].final_test_passed, results["fixed"].output[-1500:]
    assert results["fixed"].pass_to_pass["tests/test_version.py::test_runs_under_its_own_pytest"] == "passed"
    assert not results["forged"].final_test_passed and results["forged"].tampered
    with Workspace.create(task.repo) as ws, task_session(task, sandbox, ws.path) as session:
        session.start()
        reply = session.send("c", timeout_s=60)
    assert reply.exit_status == 1 and f"pytest-{version}" in reply.output, reply.output[-800:]


@pytest.mark.slow
@needs_bwrap
def test_a_published_row_gets_the_environment_its_project_declares(tmp_path: Path):
    """A row with no ``requirements`` (as SWE-bench publishes them): its project declares ``pytest<9`` for its
    tests, so the imported task's environment holds pytest 8 and no pin of pdbgym's, and it validates."""
    import json

    from pdbgym.tasks.swebench import import_swebench

    _environment("pytest==8.3.5")
    root = make_task(tmp_path / "made")
    checkout = root / "repo"
    (checkout / "pyproject.toml").write_text(
        '[project]\nname = "calc"\nversion = "0.1"\n[project.optional-dependencies]\ntest = ["pytest>=8,<9"]\n')
    (checkout / "tests" / "test_version.py").write_text(
        "import pytest\n\n\ndef test_under_pytest_8():\n    assert pytest.__version__.startswith('8.')\n")
    data = json.loads((root / "task.json").read_text())
    row = {**data, "repo_path": str(checkout), "FAIL_TO_PASS": json.dumps(data["FAIL_TO_PASS"]),
           "PASS_TO_PASS": json.dumps([*data["PASS_TO_PASS"], "tests/test_version.py::test_under_pytest_8"])}
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text(json.dumps(row) + "\n")
    (outcome,) = import_swebench(jsonl, tmp_path / "tasks")
    assert not outcome.error, outcome.error
    task = load_task(outcome.task_dir)
    assert any(r.startswith("pytest==8.") for r in task.requirements), task.requirements
    report = validate_task(task)
    assert report.ok, report.problems


@pytest.mark.slow
@needs_bwrap
def test_a_published_row_with_a_src_layout_pytest_8_and_a_released_copy_in_its_environment(tmp_path: Path,
                                                                                         monkeypatch):
    """The three traps of real instances at once, through ``import-swebench --mirrors`` with a row as
    published: the project ``six`` has a src layout, declares ``pytest<9`` for its tests, and a test
    dependency (python-dateutil) that requires ``six``, so a released six is installed beside the repo.
    The task imports, validates (the repo's six is what the tests and the pdb session import) and the
    oracle's fix solves it, with no adjustment to the row."""
    import json

    from typer.testing import CliRunner

    from pdbgym.cli import app

    _environment("pytest==8.3.5")
    monkeypatch.setenv("PDBGYM_GIT_BASE_URL", f"file://{tmp_path}/no-such-remote")
    six_test = "import pytest\nimport six\n\n\ndef test_pytest_8():\n    assert pytest.__version__.startswith('8.')\n"
    row = published_row(
        tmp_path / "mirrors" / "acme" / "six", "acme/six",
        {"pyproject.toml": '[project]\nname = "six"\nversion = "0.1"\n[project.optional-dependencies]\n'
                           'test = ["python-dateutil==2.9.0.post0", "pytest>=8,<9"]\n'
                           '[tool.setuptools.package-dir]\n"" = "src"\n',
         "src/six.py": "def ensure_text(value):\n    return value.upper()\n", "tests/test_six.py": six_test},
        {"src/six.py": "def ensure_text(value):\n    return value\n",
         "tests/test_six.py": six_test + "\n\ndef test_ensure_text():\n    assert six.ensure_text('a') == 'a'\n"},
        "src", ["tests/test_six.py::test_ensure_text"], ["tests/test_six.py::test_pytest_8"])
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text(json.dumps(row) + "\n")
    result = CliRunner().invoke(app, ["tasks", "import-swebench", str(jsonl), "--out", str(tmp_path / "tasks"),
                                      "--mirrors", str(tmp_path / "mirrors"), "--build-envs"])
    assert result.exit_code == 0, result.output
    task = load_task(tmp_path / "tasks" / "acme__six-1")
    assert any(r.startswith("pytest==8.") for r in task.requirements), task.requirements
    sandbox = task_sandbox(get_sandbox("bwrap"), task)
    released = [p for p in sandbox.site_packages.iterdir() if p.name in ("six.py", "six")] if sandbox.site_packages \
        else []
    assert released, "python-dateutil was meant to pull a released six into the environment"
    report = validate_task(task)
    assert report.ok, report.problems
    with Workspace.create(task.repo) as ws:
        apply_patch(ws.path, task.patch)
        assert grade(task, ws.path, sandbox).final_test_passed
