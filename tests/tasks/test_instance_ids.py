"""Instance ids name folders and files (transcripts, imports, caches): one rule keeps them plain names."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from homefixtures import fresh_home
from typer.testing import CliRunner

from pdbgym.cli import app
from pdbgym.errors import TaskFormatError
from pdbgym.tasks.model import INSTANCE_ID_RULE, Task, instance_id_problem, load_task
from pdbgym.tasks.suites import resolve_tasks
from pdbgym.tasks.swebench import SwebenchError, row_to_task

from taskfixtures import PATCH, make_task

BAD_IDS = ["../../../../escaped", "..", ".", ".hidden", "a/b", "a\\b", "a\0b", "", " ", "x" * 201, "-rf",
           "with space", "tab\there", "naïve"]
GOOD_IDS = ["demo__sub", "builtin__logstats-level-counts", "pypi__toolz-1.2.0__swap_args-0a1b2c3d4e",
            "getmoto__moto-7168", "oauthlib__oauthlib.1fd52536.combine_file__09vlzwgc", "x" * 200, "_x", "7"]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_bad_id_is_refused_at_load_naming_file_field_and_rule(tmp_path, bad):
    folder = make_task(tmp_path / "task", instance_id=bad)
    with pytest.raises(TaskFormatError) as refused:
        load_task(folder)
    message = str(refused.value)
    assert str(folder / "task.json") in message and "'instance_id'" in message and INSTANCE_ID_RULE in message
    with pytest.raises(TaskFormatError, match="instance_id"):
        Task(instance_id=bad, FAIL_TO_PASS=["t.py::t"], PASS_TO_PASS=[], patch=PATCH, path=folder)


@pytest.mark.parametrize("good", GOOD_IDS)
def test_plain_ids_pass(good):
    assert instance_id_problem(good) is None


def test_every_packaged_task_id_passes_the_rule():
    tasks = resolve_tasks("builtin") + resolve_tasks("regression")
    assert len(tasks) > 20 and all(instance_id_problem(t.instance_id) is None for t in tasks)


def test_the_swebench_import_uses_the_same_rule(tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for bad in ("../up", ".hidden", "x y"):
        row = {"instance_id": bad, "patch": PATCH, "FAIL_TO_PASS": [], "PASS_TO_PASS": [], "repo_path": str(checkout)}
        with pytest.raises(SwebenchError, match="instance_id"):
            row_to_task(row, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _files_under(root: Path) -> set[Path]:
    return {Path(folder, name) for folder, _, names in os.walk(root) for name in names}


def test_eval_never_writes_outside_its_out_folder(tmp_path, monkeypatch):
    """End to end: a task whose id climbs out of ``--out`` (the transcript path is
    ``<out>/transcripts/<arm>/<instance_id>/run-N.json``) is refused before any episode or file."""
    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    tasks = tmp_path / "tasks"
    make_task(tasks / "good", instance_id="demo__good")
    make_task(tasks / "climber", instance_id="../../../../escaped")
    out = tmp_path / "a" / "out"
    before = _files_under(tmp_path)
    result = CliRunner().invoke(app, ["eval", "--tasks", str(tasks), "--arm", "ref=scripted", "--runs", "1",
                                      "--out", str(out), "--json", str(out / "s.json")])
    written = _files_under(tmp_path) - before
    assert not (tmp_path / "escaped").exists()
    assert all(path.is_relative_to(out) for path in written), sorted(map(str, written))
    assert result.exit_code != 0
    message = str(result.exception) + result.output
    assert "instance_id" in message and str(tasks / "climber" / "task.json") in message
    assert json.loads((tasks / "climber" / "task.json").read_text())["instance_id"].startswith("..")
