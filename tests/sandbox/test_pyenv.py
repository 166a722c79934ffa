"""Task environments: requirements refused by shape, builds atomic and checked, the cache reused, and the
sandbox seeing the task's packages only (read-only)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import zipfile
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
    "evil===${HOME}", 'x==1.0; python_version > "${HOME}"', "x===1.0", "x==1.0; os_name == '$HOME'",
    "x==1.0+evil.zip", "x==1.0+evil.whl",
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


# -- host variables: requirements never pass through a requirements file (red-team finding 5) --------------


@pytest.mark.parametrize(("line", "said"), [
    ("evil===${HOME}", "'$'"), ('x==1.0; python_version > "${HOME}"', "'$'"), ("x[${HOME}]==1.0", "'$'"),
    ("evil===1.0", "'==='"), ("x==1.0+evil.tar.gz", "archive"),
])
def test_host_variables_and_arbitrary_equality_are_refused_naming_the_fix(line: str, said: str) -> None:
    problem = pyenv.requirement_problem(line)
    assert problem is not None and said in problem and line[:20] in problem and "==VERSION" in problem
    with pytest.raises(EnvironmentBuildError, match="refused requirements"):
        ensure_environment([line])


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_the_installer_gets_each_requirement_as_an_argument(installer: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``-r`` file (whose ``${VAR}`` the installer expands from the host): each requirement is one argument
    after ``--``, so not even a requirement starting with a dash could become an option."""
    monkeypatch.setattr(pyenv.shutil, "which", lambda name, *a, **k: "/usr/bin/uv" if installer == "uv" else None)
    requirements = ["six==1.17.0", "attrs[tests]==25.1.0; python_version >= '3.8'", "pytest==9.0.0"]
    name, argv = pyenv.installer_command(tmp_path / "site", requirements)
    assert name == installer and "-r" not in argv and "--requirement" not in argv
    assert argv[-len(requirements) - 1:] == ["--", *requirements]


def _tiny_wheel(folder: Path) -> Path:
    """A pure-Python wheel written by hand (no build tool runs): ``tiny==1.0`` holding ``tiny.py``."""
    files = {"tiny.py": b"VALUE = 'tiny'\n",
             "tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n",
             "tiny-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
              for path, data in files.items()]
    files["tiny-1.0.dist-info/RECORD"] = ("\n".join([*record, "tiny-1.0.dist-info/RECORD,,"]) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "tiny-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as bundle:
        for path, data in files.items():
            bundle.writestr(path, data)
    return wheel


@pytest.fixture
def real_pip_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Builds by the real pip from a local find-links folder (``PIP_NO_INDEX``/``PIP_FIND_LINKS``: the user's
    own pip settings, which builds keep honouring), without the runner's pins; returns each build's argv."""
    monkeypatch.setenv("PDBGYM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(_tiny_wheel(tmp_path / "wheels").parent))
    monkeypatch.setattr(pyenv.shutil, "which", lambda name, *a, **k: None)  # pip, whose settings these are
    monkeypatch.setattr(pyenv, "runner_pins", lambda: ())
    seen: list[list[str]] = []
    real_run = pyenv._run_installer

    def recording(argv: list[str], *args, **kwargs):
        seen.append(list(argv))
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(pyenv, "_run_installer", recording)
    return seen


def test_a_real_build_passes_requirements_as_arguments(real_pip_offline: list[list[str]]) -> None:
    info = ensure_environment(["Tiny==1.0"])
    assert (info.site_packages / "tiny.py").read_text() == "VALUE = 'tiny'\n"
    [argv] = real_pip_offline
    assert "-r" not in argv and argv[-2:] == ["--", "tiny==1.0"], argv
    assert not list(info.path.rglob("requirements*.txt"))


def test_a_host_variable_reaching_the_installer_is_not_expanded(real_pip_offline: list[list[str]],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack past the shape check: pip expands ``${VAR}`` in a ``-r`` file, and its "no matching
    distribution for tiny===<value>" error carried the host's value back. As an argument it stays literal."""
    monkeypatch.setenv("PDBGYM_RED_TEAM_SECRET", "host-secret-4c1d")
    final = pyenv.envs_home() / "k"
    final.parent.mkdir(parents=True)
    with pytest.raises(EnvironmentBuildError) as caught:
        pyenv._build(["tiny===${PDBGYM_RED_TEAM_SECRET}"], "k", final, None, 120.0)
    assert "host-secret-4c1d" not in str(caught.value) and "${PDBGYM_RED_TEAM_SECRET}" in str(caught.value)
    assert real_pip_offline and not os.path.lexists(final)
