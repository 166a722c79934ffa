"""Task environments built without the network: an installer that copies the runner's packages."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from pdbgym.sandbox import pyenv

# An installer that needs no network: the runner's packages copied from pdbgym's own, plus what the test
# asks for through FAKE_* variables (a module, a link, a failure with a resolver's message).
FAKE_INSTALLER = textwrap.dedent('''
    import os, shutil, sys
    target, separator, requirements = sys.argv[1], sys.argv[2], sys.argv[3:]  # as pip gets them: after --
    assert separator == "--" and requirements, sys.argv
    log = os.environ.get("FAKE_LOG")
    if log:
        open(log, "a").write(" ".join(requirements) + "\\n")
    print("Collecting " + requirements[0], flush=True)
    fail_on = os.environ.get("FAKE_FAIL_ON")
    if os.environ.get("FAKE_FAIL") or (fail_on and any(fail_on in r for r in requirements)):
        print("ERROR: Could not find a version that satisfies the requirement " + requirements[0])
        print("ERROR: No matching distribution found for " + requirements[0])
        sys.exit(1)
    shutil.copytree(os.environ["FAKE_RUNNER"], target)
    for root, dirs, files in os.walk(target):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    open(os.path.join(target, "onlyhere.py"), "w").write("THREE = 3\\n")
    released = os.environ.get("FAKE_RELEASED")  # a released copy of a package, as a dependency would pull in
    if released:
        name, _, source = released.partition(":")
        os.makedirs(os.path.join(target, name))
        open(os.path.join(target, name, "__init__.py"), "w").write("")
        open(os.path.join(target, name, "ops.py"), "w").write(source.replace("\\\\n", "\\n"))
    if os.environ.get("FAKE_LINK"):
        os.symlink(os.environ["FAKE_LINK"], os.path.join(target, "onlyhere_link"))
''')


def use_fake_installer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``$PDBGYM_HOME`` whose builds run the fake installer; returns the file logging each build."""
    monkeypatch.setenv("PDBGYM_HOME", str(tmp_path / "home"))
    script = tmp_path / "fake_installer.py"
    script.write_text(FAKE_INSTALLER)
    monkeypatch.setenv("FAKE_RUNNER", str(pyenv.runner_environment()))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "builds.log"))
    monkeypatch.setattr(pyenv, "installer_command",
                        lambda target, reqs: ("fake", [sys.executable, str(script), str(target), "--", *reqs]))
    return tmp_path / "builds.log"
