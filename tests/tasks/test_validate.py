"""Task validation runs the real tests in the sandbox and names what is wrong."""

import json

from typer.testing import CliRunner

from pdbgym.cli import app
from pdbgym.tasks.model import load_task
from pdbgym.tasks.validate import validate_task, validate_tasks

from taskfixtures import PATCH, make_task


def test_valid_task_passes_every_check(tiny_task):
    report = validate_task(tiny_task)
    assert report.ok, report.problems
    assert report.checks == {"repo_stays_inside": True, "patch_stays_inside": True, "patch_spares_tests": True,
                             "fail_to_pass_fail_before": True, "tests_import_the_repo": True,
                             "pass_to_pass_pass_before": True, "patch_applies": True,
                             "all_pass_after_patch": True, "pdb_prompt": True, "pdb_reaches_the_failure": True}


def test_each_broken_task_is_named(tmp_path):
    wrong_lists = load_task(make_task(tmp_path / "a", FAIL_TO_PASS=["tests/test_ops.py::test_add"],
                                      PASS_TO_PASS=["tests/test_ops.py::test_sub"]))
    bad_patch = load_task(make_task(tmp_path / "b", patch=PATCH.replace("return a + b\n+", "return a * b\n+")))
    test_patch = load_task(make_task(tmp_path / "c", patch=PATCH.replace("calc/ops.py", "tests/test_ops.py")))
    missing_node = load_task(make_task(tmp_path / "d", PASS_TO_PASS=["tests/test_ops.py::test_nope"]))
    reports = {r.instance_id + str(i): r for i, r in enumerate(
        validate_tasks([wrong_lists, bad_patch, test_patch, missing_node], check_debugger=False))}
    a, b, c, d = reports.values()
    assert "FAIL_TO_PASS test(s) pass on the buggy repo" in " ".join(a.problems)
    assert "PASS_TO_PASS test(s) fail on the buggy repo" in " ".join(a.problems)
    assert "patch does not apply" in " ".join(b.problems)
    assert "edits test files" in " ".join(c.problems)
    assert "tests/test_ops.py::test_nope" in " ".join(d.problems)
    # The real cause is named: pytest ran nothing because a node id does not exist.
    assert "check the node ids" in d.problems[-1] and "not found" in d.problems[-1], d.problems
    assert not any("no outcome" in problem for problem in a.problems + b.problems + c.problems)


def test_validate_cli_exit_codes(tmp_path):
    make_task(tmp_path / "good")
    runner = CliRunner()
    result = runner.invoke(app, ["tasks", "validate", str(tmp_path / "good"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["ok"] is True
    make_task(tmp_path / "bad", FAIL_TO_PASS=["tests/test_ops.py::test_add"], instance_id="bad")
    result = runner.invoke(app, ["tasks", "validate", str(tmp_path / "bad"), "--no-debugger", "--json"])
    assert result.exit_code == 1


def test_list_cli(tmp_path):
    make_task(tmp_path / "one")
    result = CliRunner().invoke(app, ["tasks", "list", str(tmp_path), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output)[0]["instance_id"] == "demo__sub"


def test_one_broken_folder_is_one_failed_row(tmp_path):
    make_task(tmp_path / "good")
    (tmp_path / "broken" / "repo").mkdir(parents=True)
    (tmp_path / "broken" / "task.json").write_text('{"instance_id": "x"}')
    result = CliRunner().invoke(app, ["tasks", "validate", str(tmp_path), "--no-debugger", "--json"])
    assert result.exit_code == 1
    rows = {r["instance_id"]: r for r in json.loads(result.output)}
    assert rows["demo__sub"]["ok"] is True
    assert rows["broken"]["ok"] is False and "missing required field" in rows["broken"]["problems"][0]


def test_a_test_command_that_is_not_pytest_is_refused_at_load_and_by_validate(tmp_path):
    """Grading can only run 'python -m pytest [options]'; any other test_command is named when the task
    loads (and by `tasks validate`), not found out at grading time."""
    import dataclasses

    import pytest as pytest_module

    from pdbgym.errors import TaskFormatError

    for command in ("bash -c 'pytest'", "python run_tests.py", "tox -e py311", "python -m unittest", "pytest 'unclosed"):
        folder = make_task(tmp_path / f"t{len(list(tmp_path.iterdir()))}", instance_id="demo__shell",
                           test_command=command)
        with pytest_module.raises(TaskFormatError) as caught:
            load_task(folder)
        message = str(caught.value)
        assert "'demo__shell'" in message and "python -m pytest [options]" in message and repr(command) in message
    for command in ("python -m pytest", "python3 -m pytest -x --tb=short", "pytest -q"):
        assert load_task(make_task(tmp_path / f"ok{len(command)}", test_command=command)).test_command == command

    # The CLI names it in its report, as a folder that does not load.
    make_task(tmp_path / "cli" / "shell", instance_id="demo__shell", test_command="make test")
    result = CliRunner().invoke(app, ["tasks", "validate", str(tmp_path / "cli"), "--no-debugger", "--json"])
    assert result.exit_code == 1
    assert "python -m pytest [options]" in result.output and "make test" in result.output

    # A Task built in code (not loaded) is stopped by validate before any run, and by the runner.
    from pdbgym.grading.testrun import pytest_extra_args

    built = dataclasses.replace(load_task(make_task(tmp_path / "built")), test_command="make test")
    report = validate_task(built, check_debugger=False)
    assert report.checks == {"test_command_runs_pytest": False} and "make test" in report.problems[0]
    with pytest_module.raises(TaskFormatError, match="python -m pytest"):
        pytest_extra_args(built)


def test_a_task_whose_validation_raises_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    import pdbgym.tasks.validate as validate

    real = validate.validate_task

    def flaky(task, *args, **kwargs):
        if task.instance_id == "breaks":
            raise OSError("disk full")
        return real(task, *args, **kwargs)

    monkeypatch.setattr(validate, "validate_task", flaky)
    make_task(tmp_path / "a", instance_id="breaks")
    make_task(tmp_path / "b", instance_id="fine")
    result = CliRunner().invoke(app, ["tasks", "validate", str(tmp_path), "--no-debugger", "--workers", "1"])
    assert result.exit_code == 1, result.output
    assert "validation stopped: disk full" in result.stdout and "1/2 tasks valid, 1 failed" in result.stdout


def test_a_task_whose_tests_write_into_their_project_fails_validation_as_grading_would(tmp_path):
    """Grading binds the whole tree read-only; validation runs the same way, so such a task is refused
    here, naming the read-only file system, and never validated then unsolvable in every episode."""
    from pdbgym.sandbox import get_sandbox

    root = make_task(tmp_path / "writer")
    test = root / "repo" / "tests" / "test_ops.py"
    test.write_text(test.read_text() + "\n\ndef test_writes_a_report():\n    open('report.txt', 'w').write('x')\n")
    data = json.loads((root / "task.json").read_text())
    data["PASS_TO_PASS"].append("tests/test_ops.py::test_writes_a_report")
    (root / "task.json").write_text(json.dumps(data))
    sandbox = get_sandbox()
    report = validate_task(load_task(root), sandbox, check_debugger=False)
    if not sandbox.binds_readonly:
        return  # the plain backend binds nothing: grading there lets the test write too
    assert not report.ok and "Read-only file system" in " ".join(report.problems), report.problems
