"""A task with requirements: validated, and solved by its reference fix, in its own environment under
bubblewrap; its code cannot import a package outside that environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdbgym.env import DebugEnv, EnvConfig
from pdbgym.env.tools import Action
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason
from pdbgym.tasks.model import load_task
from pdbgym.tasks.validate import validate_task

from envfixtures import use_fake_installer
from taskfixtures import PATCH, make_task

pytestmark = pytest.mark.skipif(bwrap_unavailable_reason() is not None, reason="bubblewrap cannot run here")


@pytest.fixture
def fake_installer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_fake_installer(tmp_path, monkeypatch)

ISOLATION_TEST = '''
import importlib

import onlyhere
import pytest


def test_needs_its_package():
    assert onlyhere.THREE == 3


@pytest.mark.parametrize("name", ["rich", "typer", "numpy", "torch", "pdbgym.env"])
def test_nothing_outside_its_environment(name):
    with pytest.raises(ImportError):
        importlib.import_module(name)
'''


def _env_task(root: Path) -> Path:
    make_task(root, requirements=["onlyhere==1.0"], PASS_TO_PASS=[
        "tests/test_ops.py::test_add", "tests/test_env.py::test_needs_its_package",
        *[f"tests/test_env.py::test_nothing_outside_its_environment[{n}]"
          for n in ("rich", "typer", "numpy", "torch", "pdbgym.env")]])
    (root / "repo" / "tests" / "test_env.py").write_text(ISOLATION_TEST)
    return root


def test_a_task_validates_and_its_fix_solves_in_its_environment(tmp_path: Path, fake_installer: Path) -> None:
    task = load_task(_env_task(tmp_path / "task"))
    assert task.requirements == ["onlyhere==1.0"]
    assert json.loads((task.path / "task.json").read_text())["requirements"] == ["onlyhere==1.0"]
    report = validate_task(task)
    assert report.ok, report.problems
    env = DebugEnv(task, EnvConfig(sandbox="bwrap"))
    try:
        env.reset()
        env.step(Action("edit", {"path": "calc/ops.py", "old": "    return a + b\n\n\ndef sub(a, b):\n    return a + b",
                                 "new": "    return a + b\n\n\ndef sub(a, b):\n    return a - b"}))
        _, done, info = env.step(Action("submit"))
    finally:
        env.close()
    assert done and env.result is not None and env.result.final_test_passed, env.result
    assert fake_installer.read_text().count("\n") == 1  # the episode reused validation's build
    assert "a - b" in PATCH


def test_the_same_task_without_its_environment_fails_its_tests(tmp_path: Path, fake_installer: Path) -> None:
    """Without the requirement the package is not there (pdbgym's own environment is not the task's)."""
    root = _env_task(tmp_path / "task")
    data = json.loads((root / "task.json").read_text())
    del data["requirements"]
    (root / "task.json").write_text(json.dumps(data))
    report = validate_task(load_task(root))
    assert not report.ok and fake_installer.exists() is False
