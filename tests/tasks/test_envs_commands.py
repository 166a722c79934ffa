"""`pdbgym envs build|list|prune` on a fresh home, with an installer that needs no network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdbgym.cli import app
from pdbgym.sandbox.pyenv import list_environments

from envfixtures import use_fake_installer
from taskfixtures import make_task


def test_build_list_and_prune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builds = use_fake_installer(tmp_path, monkeypatch)
    suite = tmp_path / "suite"
    make_task(suite / "a", instance_id="a", requirements=["onlyhere==1.0"])
    make_task(suite / "b", instance_id="b", requirements=["OnlyHere==1.0"])  # the same environment
    make_task(suite / "c", instance_id="c")
    runner = CliRunner()
    first = runner.invoke(app, ["envs", "build", str(suite), "--json"])
    assert first.exit_code == 0, first.output
    rows = json.loads(first.stdout)
    assert len(rows) == 1 and rows[0]["cached"] is False and builds.read_text().count("\n") == 1
    again = runner.invoke(app, ["envs", "build", str(suite / "b"), "--json"])
    assert rows[0]["tasks"] == ["a", "b"] and rows[0]["error"] == ""
    assert json.loads(again.stdout) == [rows[0] | {"cached": True, "build_s": 0.0, "tasks": ["b"]}]  # no second build
    assert builds.read_text().count("\n") == 1
    other = runner.invoke(app, ["envs", "build", "-r", "onlyhere==2.0"])
    assert other.exit_code == 0 and "built in" in other.stdout, other.output
    listed = json.loads(runner.invoke(app, ["envs", "list", "--json"]).stdout)
    assert len(listed) == 2 and all(e["bytes"] > 0 for e in listed)
    assert "2 environment(s)" in runner.invoke(app, ["envs", "list"]).stdout
    kept = runner.invoke(app, ["envs", "prune", "--keep", str(suite)])
    assert kept.exit_code == 0 and "removed 1 environment(s)" in kept.stdout, kept.output
    assert [e.requirements for e in list_environments()] == [["onlyhere==1.0"]]
    assert "removed 1" in runner.invoke(app, ["envs", "prune"]).stdout and list_environments() == []


def test_build_refuses_a_requirement_that_is_not_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_installer(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["envs", "build", "-r", "six @ file:///etc"])
    assert result.exit_code != 0 and "URL or path" in str(result.exception), result.output


def test_build_goes_on_past_a_failure_and_ends_with_a_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_installer(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_FAIL_ON", "nosuchpkg")
    suite = tmp_path / "suite"
    make_task(suite / "a", instance_id="fails", requirements=["nosuchpkg==1.0"])  # tried first
    make_task(suite / "b", instance_id="builds", requirements=["onlyhere==1.0"])
    make_task(suite / "c", instance_id="plain")
    (suite / "d").mkdir()
    (suite / "d" / "task.json").write_text("{}")  # does not load: a row of its own
    result = CliRunner().invoke(app, ["envs", "build", str(suite)])
    assert result.exit_code == 1, result.output
    lines = {line.split()[1]: line for line in result.stdout.splitlines() if line.startswith("│ ") and line.split()[1]}
    assert "FAIL" in lines["fails"] and "nosuchpkg" in result.stdout
    assert "ok" in lines["builds"] and "built in" in lines["builds"]
    assert "ok" in lines["plain"] and "FAIL" in lines["d"]
    assert "2/4 tasks with their environment, 2 failed" in result.stdout
    assert [e.requirements for e in list_environments()] == [["onlyhere==1.0"]]
    rows = json.loads(CliRunner().invoke(app, ["envs", "build", str(suite), "--json"]).stdout)
    assert {r["tasks"][0]: bool(r["error"]) for r in rows} == {"fails": True, "builds": False, "d": True}
