"""The task format: loading names every wrong field; patches parse into hunks that reproduce the fix."""


import pytest

from pdbgym.errors import TaskFormatError
from pdbgym.tasks.model import load_task
from pdbgym.tasks.patches import apply_patch, parse_patch
from pdbgym.tasks.suites import resolve_tasks

from taskfixtures import PATCH, make_task


def test_load_valid_task(tmp_path):
    task = load_task(make_task(tmp_path))
    assert task.instance_id == "demo__sub"
    assert task.test_files == ["tests/test_ops.py"]
    assert "tests/test_ops.py::test_sub" in task.statement()
    assert len(task.content_hash()) == 64


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"instance_id": None}, "missing required field 'instance_id'"),
        ({"FAIL_TO_PASS": "tests/test_ops.py::test_sub"}, "field 'FAIL_TO_PASS' must be list"),
        ({"FAIL_TO_PASS": []}, "FAIL_TO_PASS' is empty"),
        ({"patch": "just words"}, "not a unified diff"),
        ({"difficulty": "trivial"}, "field 'difficulty' must be one of"),
        ({"split": "dev"}, "field 'split' must be one of"),
        ({"PASS_TO_PASS": ["tests/missing.py::test_x"]}, "not in repo/"),
        ({"FAIL_TO_PASS": ["/abs/test.py::t"]}, "relative to repo/"),
    ],
)
def test_load_names_the_wrong_field(tmp_path, override, message):
    with pytest.raises(TaskFormatError, match=message):
        load_task(make_task(tmp_path, **override))


def test_load_rejects_missing_pieces(tmp_path):
    with pytest.raises(TaskFormatError, match="no such task folder"):
        load_task(tmp_path / "nope")
    (tmp_path / "t").mkdir()
    with pytest.raises(TaskFormatError, match="no task.json"):
        load_task(tmp_path / "t")
    (tmp_path / "t" / "task.json").write_text("{not json")
    (tmp_path / "t" / "repo").mkdir()
    with pytest.raises(TaskFormatError, match="not valid JSON"):
        load_task(tmp_path / "t")


def test_patch_hunks_and_changed_span(tmp_path):
    hunks = parse_patch(PATCH)
    assert [h.path for h in hunks] == ["calc/ops.py"]
    first, last, new = hunks[0].changed_span()
    assert (first, last, new) == (6, 6, ["    return a - b"])


def test_apply_patch_inside_a_git_repo_uses_the_folder(tmp_path):
    # tmp_path may sit inside some repository; git must still patch relative to the folder itself.
    task = load_task(make_task(tmp_path))
    apply_patch(task.repo, task.patch)
    assert "a - b" in (task.repo / "calc" / "ops.py").read_text()
    with pytest.raises(TaskFormatError, match="does not apply"):
        apply_patch(task.repo, task.patch)


def test_resolve_unknown_spec_is_a_clear_error():
    with pytest.raises(TaskFormatError, match="neither a suite"):
        resolve_tasks("no-such-suite-or-path")


def test_duplicate_ids_refused(tmp_path):
    make_task(tmp_path / "a")
    make_task(tmp_path / "b")
    with pytest.raises(TaskFormatError, match="duplicate instance_id"):
        resolve_tasks(tmp_path)
