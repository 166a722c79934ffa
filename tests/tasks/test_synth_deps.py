"""What synthesis reads as a release's test environment (from its files; no network), and synthesis of
released projects whose tests need third-party packages (PyPI; slow)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdbgym.agent.play import play_policy
from pdbgym.agent.scripted import ScriptedPolicy
from pdbgym.cli import app
from pdbgym.sandbox import get_sandbox
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason
from pdbgym.sandbox.pyenv import list_environments
from pdbgym.tasks.model import load_task
from pdbgym.tasks.synth.deps import declared_requirements, project_name

PKG_INFO = """Metadata-Version: 2.1
Name: demo
Version: 1.0
Requires-Dist: six>=1.5
Requires-Dist: tomli>=1; python_version < "3.0"
Requires-Dist: docs-theme; extra == "docs"
Requires-Dist: freezegun; extra == "test"
Requires-Dist: demo[extra-fixtures]; extra == "dev"
Requires-Dist: pympler; extra == "extra-fixtures"
Provides-Extra: test
"""


def test_runtime_and_test_dependencies_are_read_and_tools_left_out(tmp_path: Path) -> None:
    origin = tmp_path / "demo-1.0"
    (origin / "requirements").mkdir(parents=True)
    (origin / "PKG-INFO").write_text(PKG_INFO)
    (origin / "pyproject.toml").write_text(
        '[project]\nname = "demo"\ndependencies = ["attrs>=20"]\n'
        '[project.optional-dependencies]\ntests = ["hypothesis", "pytest>=7", "pytest-cov", "mypy"]\n'
        '[dependency-groups]\ntest = ["cloudpickle"]\nlint = ["ruff"]\n')
    (origin / "requirements" / "tests.txt").write_text("-r ../../../outside.txt\n-e .\nsimplejson==3.19.3  # pinned\n")
    (tmp_path / "outside.txt").write_text("leaked==1.0\n")  # a -r out of the sdist is never followed
    (origin / "tox.ini").write_text("[testenv]\ndeps =\n    pretend\n    {[base]deps}\n")
    declared = declared_requirements(origin, "demo")
    assert declared == ["attrs>=20", "cloudpickle", "freezegun", "hypothesis", "pretend",
                        "pympler", "pytest-cov", "simplejson==3.19.3", "six>=1.5"], declared
    # the project itself (demo[extra-fixtures]) is expanded, never a requirement; pytest is the runner's
    assert not any(r.startswith(("demo", "pytest>", "pytest=", "mypy", "ruff", "docs-theme", "tomli", "leaked"))
                   for r in declared)


def test_setup_py_literals_are_read_never_run(tmp_path: Path) -> None:
    """An older project declares its dependencies only in ``setup(...)``: read from the syntax tree
    (literals, or module-level names bound to them); the file is never executed. A pytest the project
    needs below pdbgym's own is kept, so its environment gets that pytest."""
    origin = tmp_path / "old-1.0"
    origin.mkdir()
    canary = tmp_path / "ran"
    (origin / "setup.py").write_text(
        f"open({str(canary)!r}, 'w').write('setup.py ran')\n"
        "from setuptools import setup\nREQS = ['six>=1.10']\n"
        "setup(name='old', install_requires=REQS + [], tests_require=['pytest<9', 'freezegun'],\n"
        "      extras_require={'docs': ['sphinx'], 'test': 'pretend', ':python_version<\"3\"': ['mock']})\n")
    declared = declared_requirements(origin, "old")
    assert declared == ["freezegun", "pretend", "pytest<9"], declared  # REQS + [] is no literal: left out
    assert not canary.exists()
    (origin / "setup.py").write_text("from setuptools import setup\nREQS = ['six>=1.10']\nsetup(install_requires=REQS)\n")
    assert declared_requirements(origin, "old") == ["six>=1.10"]


def test_packaging_files_that_are_links_are_never_read(tmp_path: Path) -> None:
    """A release's or a mirror's tree is hostile: a pyproject.toml, setup.cfg or setup.py that links to a
    file elsewhere on the host is left unread, as if absent."""
    origin = tmp_path / "linked-1.0"
    origin.mkdir()
    host = tmp_path / "host"
    host.mkdir()
    (host / "pyproject.toml").write_text('[project]\nname = "host-secret"\ndependencies = ["leaked==1.0"]\n')
    (host / "setup.cfg").write_text("[options]\ninstall_requires =\n    leaked-too==1.0\n")
    (host / "setup.py").write_text("setup(name='host-secret', install_requires=['leaked-three==1.0'])\n")
    for name in ("pyproject.toml", "setup.cfg", "setup.py"):
        (origin / name).symlink_to(host / name)
    assert declared_requirements(origin, "linked") == []
    assert project_name(origin) is None


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["freezegun==1.5.1", "humanize==4.11.0"])
def test_synthesis_of_a_project_with_dependencies_keeps_validated_tasks(spec: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The release's tests import third-party packages (python-dateutil, freezegun): its environment is
    built, the tasks are kept in it and record it, and ``tasks validate`` rebuilds it from the record
    alone in another home."""
    if bwrap_unavailable_reason() is not None:
        pytest.skip("a project with dependencies is synthesized under bwrap only")
    monkeypatch.setenv("PDBGYM_HOME", str(tmp_path / "home"))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["tasks", "synth", f"pypi:{spec}", "--out", str(out), "--max", "2",
                                      "--seed", "0", "--workers", "2", "--json"])
    report = json.loads((out / "synth_report.json").read_text())[0] if (out / "synth_report.json").is_file() else {}
    if "could not download" in str(report.get("error", "")) or "cannot resolve" in str(report.get("error", "")):
        pytest.skip(f"PyPI cannot be reached: {report['error'][:200]}")
    assert result.exit_code == 0 and report.get("kept", 0) >= 1, (result.output[-2000:], report.get("error"))
    tasks = [json.loads((out / task_id / "task.json").read_text()) for task_id in report["task_ids"]]
    assert all(t["requirements"] and t["requirements"] == tasks[0]["requirements"] for t in tasks)
    assert len(list_environments()) == 1
    monkeypatch.setenv("PDBGYM_HOME", str(tmp_path / "other-home"))  # nothing cached: built from the record
    validated = CliRunner().invoke(app, ["tasks", "validate", str(out), "--workers", "2"])
    assert validated.exit_code == 0, validated.output[-2000:]
    assert len(list_environments()) == 1 and os.listdir(tmp_path / "other-home" / "envs")
    task = load_task(out / report["task_ids"][0])  # the oracle solves it in its environment, under bwrap
    assert play_policy(task, ScriptedPolicy(task), sandbox=get_sandbox("bwrap")).final_test_passed
