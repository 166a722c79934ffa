"""Task environments: requirements refused by shape, builds atomic and checked, the cache reused, and the
sandbox seeing the task's packages only (read-only)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from pdbgym.errors import TaskFormatError
from pdbgym.sandbox import Limits, get_sandbox, pyenv
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason
from pdbgym.sandbox.pyenv import (
    EnvironmentBuildError,
    ensure_environment,
    list_environments,
    prune_environments,
)
from pdbgym.tasks.model import load_task

from envfixtures import use_fake_installer

needs_bwrap = pytest.mark.skipif(bwrap_unavailable_reason() is not None, reason="bubblewrap cannot run here")

@pytest.fixture
def fake_installer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_fake_installer(tmp_path, monkeypatch)


@pytest.mark.parametrize("line", [
    "evil @ file:///etc", "evil @ https://example.invalid/evil.whl", "./evil", "/etc/passwd", "../evil",
    "-r /etc/shadow", "--index-url http://example.invalid/simple", "-e .", "git+https://example.invalid/x.git",
    "requests", "requests>=2", "requests==2.*", "requests==2.0 ; os_name == 'posix'\nsix==1.0", "",
])
def test_requirements_that_escape_or_float_are_refused(line: str, tmp_path: Path) -> None:
    assert pyenv.requirement_problem(line) is not None
    task = tmp_path / "task"
    (task / "repo" / "tests").mkdir(parents=True)
    (task / "repo" / "tests" / "test_x.py").write_text("def test_x():\n    assert False\n")
    (task / "task.json").write_text(json.dumps({"instance_id": "x", "FAIL_TO_PASS": ["tests/test_x.py::test_x"],
                                                "PASS_TO_PASS": [], "patch": "@@", "requirements": [line]}))
    with pytest.raises(TaskFormatError, match="requirements"):
        load_task(task)


def test_pinned_requirements_are_normalized() -> None:
    assert pyenv.check_requirements(["Six==1.17.0", "attrs[tests]==25.1.0"]) == ["attrs[tests]==25.1.0", "six==1.17.0"]
    assert pyenv.environment_key(["six==1.17.0"]) == pyenv.environment_key(["Six==1.17.0"])
    assert pyenv.environment_key(["six==1.17.0"]) != pyenv.environment_key(["six==1.16.0"])
    assert pyenv.check_requirements(["six==1.17.0", "Six==1.17.0"]) == ["six==1.17.0"]
    with pytest.raises(EnvironmentBuildError, match="more than one version"):
        pyenv.check_requirements(["six==1.17.0", "six==1.16.0"])


def test_an_environment_is_built_once_and_reused(fake_installer: Path) -> None:
    first = ensure_environment(["onlyhere==1.0"])
    second = ensure_environment(["OnlyHere==1.0"])
    assert second == first and fake_installer.read_text().count("\n") == 1  # the second spent no build
    assert (first.site_packages / "onlyhere.py").is_file()
    assert all(line in fake_installer.read_text() for line in pyenv.runner_pins())  # the runner pinned beside
    mode = (first.site_packages / "onlyhere.py").stat().st_mode
    assert not mode & 0o222 and not first.site_packages.stat().st_mode & 0o222  # read-only on the host too
    assert [e.key for e in list_environments()] == [first.key] and first.bytes > 0 and first.files > 10


def test_a_failed_build_names_the_requirement_and_leaves_nothing(fake_installer: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_FAIL", "1")
    with pytest.raises(EnvironmentBuildError, match=r"(?s)failed at nosuchpkg==1\.0.*No matching distribution"):
        ensure_environment(["nosuchpkg==1.0"])
    assert list_environments() == []
    assert not [p for p in pyenv.envs_home().iterdir() if not p.name.endswith(".lock")]


@pytest.mark.parametrize("target", ["/etc", "onlyhere.py"])
def test_a_link_in_a_built_environment_is_refused(fake_installer: Path, monkeypatch: pytest.MonkeyPatch,
                                                  target: str) -> None:
    monkeypatch.setenv("FAKE_LINK", target)
    with pytest.raises(EnvironmentBuildError, match="onlyhere_link"):
        ensure_environment(["onlyhere==1.0"])
    assert list_environments() == []


def test_a_half_built_environment_is_never_reused(fake_installer: Path) -> None:
    """A folder at the key without its manifest (a build killed between writing and renaming cannot
    leave one, but a copy or a hand can) is removed and built again; staging folders are never read."""
    key = pyenv.environment_key(["onlyhere==1.0"])
    broken = pyenv.envs_home() / key / pyenv.SITE_DIR
    broken.mkdir(parents=True)
    (broken / "onlyhere.py").write_text("raise SystemExit('half-built')\n")
    info = ensure_environment(["onlyhere==1.0"])
    assert (info.site_packages / "onlyhere.py").read_text() == "THREE = 3\n"
    assert fake_installer.read_text().count("\n") == 1
    assert [e.key for e in prune_environments()] == [key] and list_environments() == []


def _run_in(sandbox, workspace: Path, code: str):
    return sandbox.run([sys.executable, "-I", "-c", code], workspace, Limits(wall_time_s=30))


@needs_bwrap
def test_runner_environment_hides_pdbgyms_dependencies(tmp_path: Path) -> None:
    """A task without requirements sees pytest and its runner, not what pdbgym itself depends on."""
    code = ("import importlib, pytest, pytest_timeout\nfor name in ('rich', 'typer', 'numpy', 'torch', 'packaging'):\n"
            "    try:\n        importlib.import_module(name)\n    except ImportError:\n        continue\n"
            "    print('IMPORTED', name)\nprint('done')")
    result = _run_in(get_sandbox("bwrap"), tmp_path, code)
    assert result.returncode == 0 and "done" in result.output, result.output
    imported = [line for line in result.output.splitlines() if line.startswith("IMPORTED")]
    assert imported == ["IMPORTED packaging"], imported  # packaging is pytest's own dependency


@needs_bwrap
def test_the_mounted_environment_is_what_the_sandbox_imports_and_is_read_only(fake_installer: Path,
                                                                           tmp_path: Path) -> None:
    info = ensure_environment(["onlyhere==1.0"])
    sandbox = get_sandbox("bwrap").with_site_packages(info.site_packages)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    result = _run_in(sandbox, workspace, "import onlyhere; print(onlyhere.__file__, onlyhere.THREE)")
    assert result.returncode == 0 and f"{pyenv.ENV_MOUNT}/onlyhere.py 3" in result.output, result.output
    assert _run_in(get_sandbox("bwrap"), workspace, "import onlyhere").returncode != 0  # not in another's
    site_dir = next(p for p in sys.path if p.endswith("site-packages"))
    for target in (f"{pyenv.ENV_MOUNT}/onlyhere.py", f"{pyenv.ENV_MOUNT}/planted.py", f"{site_dir}/planted.pth"):
        attack = f"open({target!r}, 'w').write('import os')"
        result = _run_in(sandbox, workspace, attack)
        assert result.returncode != 0 and ("Read-only file system" in result.output
                                           or "Permission denied" in result.output), (target, result.output)
    assert (info.site_packages / "onlyhere.py").read_text() == "THREE = 3\n"
    assert not (info.site_packages / "planted.py").exists()


def test_the_plain_sandbox_refuses_an_environment(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="cannot mount a task environment"):
        get_sandbox("plain").with_site_packages(tmp_path)


@pytest.mark.slow
def test_a_real_environment_builds_from_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real installer, from PyPI (skipped where it cannot be reached); built once, then reused."""
    monkeypatch.setenv("PDBGYM_HOME", str(tmp_path / "home"))
    try:
        info = ensure_environment(["six==1.17.0"])
    except EnvironmentBuildError as exc:
        if "Could not fetch" in str(exc) or "connection" in str(exc).lower() or "network" in str(exc).lower():
            pytest.skip(f"PyPI cannot be reached: {exc}")
        raise
    assert (info.site_packages / "six.py").is_file() and (info.site_packages / "pytest").is_dir()
    assert ensure_environment(["six==1.17.0"]) == info
    if bwrap_unavailable_reason() is None:
        sandbox = get_sandbox("bwrap").with_site_packages(info.site_packages)
        result = _run_in(sandbox, tmp_path, "import six, pytest; print(six.__version__)")
        assert result.returncode == 0 and "1.17.0" in result.output, result.output
    assert os.access(info.path / pyenv.MANIFEST, os.R_OK)
