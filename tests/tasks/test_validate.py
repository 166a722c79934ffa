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
                             "fail_to_pass_fail_before": True,
                             "pass_to_pass_pass_before": True, "patch_applies": True,
                             "all_pass_after_patch": True, "pdb_prompt": True}


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
