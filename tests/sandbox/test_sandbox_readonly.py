"""Paths bound read-only over the writable workspace (``Sandbox.run(readonly_paths=...)``): the command
cannot write, replace, remove or move them away, and the rest of the workspace stays writable."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from pdbgym.errors import SandboxError
from pdbgym.sandbox import Workspace, get_sandbox
from pdbgym.sandbox.plain import PlainSandbox

needs_bwrap = pytest.mark.skipif(not shutil.which("bwrap"), reason="read-only binds need bubblewrap")

# Every way the command could change what a later reader of tests/test_a.py or pkg/sub/test_b.py sees.
ATTEMPTS = r'''
import errno, json, os
def attempt(fn):
    try:
        fn()
    except OSError as exc:
        return errno.errorcode[exc.errno]
    return "ok"
def write(path):
    with open(path, "w") as fh:
        fh.write("forged")
def swap_in(path):
    write("forged.tmp")
    os.replace("forged.tmp", path)
def move_folder(folder):
    os.rename(folder, folder + "_moved")
    os.makedirs(folder + "/sub", exist_ok=True)
results = {
    "write tests/test_a.py": attempt(lambda: write("tests/test_a.py")),
    "new file in tests": attempt(lambda: write("tests/conftest.py")),
    "replace tests/test_a.py": attempt(lambda: swap_in("tests/test_a.py")),
    "remove tests/test_a.py": attempt(lambda: os.unlink("tests/test_a.py")),
    "move tests": attempt(lambda: move_folder("tests")),
    "write pkg/sub/test_b.py": attempt(lambda: write("pkg/sub/test_b.py")),
    "replace pkg/sub/test_b.py": attempt(lambda: swap_in("pkg/sub/test_b.py")),
    "move pkg": attempt(lambda: move_folder("pkg")),
    "move pkg/sub": attempt(lambda: move_folder("pkg/sub")),
    "write pkg/sub/mod.py": attempt(lambda: write("pkg/sub/mod.py")),
    "new file in pkg/sub": attempt(lambda: write("pkg/sub/new.py")),
    "write app.py": attempt(lambda: write("app.py")),
}
print(json.dumps(results))
'''


def _layout(root: Path) -> None:
    (root / "tests").mkdir()
    (root / "tests" / "test_a.py").write_text("def test_a():\n    assert False\n")
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "sub" / "test_b.py").write_text("def test_b():\n    assert False\n")
    (root / "pkg" / "sub" / "mod.py").write_text("X = 1\n")
    (root / "app.py").write_text("Y = 1\n")


@needs_bwrap
def test_readonly_paths_cannot_be_written_replaced_or_moved_away(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _layout(repo)
    with Workspace.create(repo) as ws:
        result = get_sandbox("bwrap").run([sys.executable, "-c", ATTEMPTS], ws.path,
                                          readonly_paths=["tests", ws.path / "pkg" / "sub" / "test_b.py"])
        assert result.ok, result.output
        seen = json.loads(result.output.strip().splitlines()[-1])
        for what in ("write tests/test_a.py", "new file in tests", "write pkg/sub/test_b.py"):
            assert seen[what] == "EROFS", (what, seen)
        for what in ("replace tests/test_a.py", "remove tests/test_a.py", "move tests", "replace pkg/sub/test_b.py",
                     "move pkg", "move pkg/sub"):
            assert seen[what] in ("EBUSY", "EXDEV", "EROFS"), (what, seen)
        for what in ("write pkg/sub/mod.py", "new file in pkg/sub", "write app.py"):
            assert seen[what] == "ok", (what, seen)
        assert (ws.path / "tests" / "test_a.py").read_text().startswith("def test_a")
        assert (ws.path / "pkg" / "sub" / "test_b.py").read_text().startswith("def test_b")
        assert not (ws.path / "tests" / "conftest.py").exists()
        assert (ws.path / "app.py").read_text() == "forged"


@needs_bwrap
def test_without_readonly_paths_the_same_attempts_succeed(tmp_path):
    """The control: the attempts above are not refused by anything else in the sandbox."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _layout(repo)
    with Workspace.create(repo) as ws:
        result = get_sandbox("bwrap").run([sys.executable, "-c", ATTEMPTS], ws.path)
        seen = json.loads(result.output.strip().splitlines()[-1])
    assert seen["write tests/test_a.py"] == "ok" and seen["move pkg/sub"] == "ok", seen


def test_plain_backend_refuses_readonly_paths(tmp_path):
    (tmp_path / "t.py").write_text("")
    sandbox = PlainSandbox()
    assert not sandbox.binds_readonly
    with pytest.raises(SandboxError, match="cannot bind paths read-only"):
        sandbox.run([sys.executable, "-c", "pass"], tmp_path, readonly_paths=["t.py"])


@needs_bwrap
@pytest.mark.parametrize("bad", ["../outside.py", "/etc/passwd", "link.py", "missing.py", ".."])
def test_readonly_paths_outside_the_workspace_or_through_links_are_refused(tmp_path, bad):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "outside.py").write_text("")
    os.symlink(tmp_path / "outside.py", workspace / "link.py")
    with pytest.raises(SandboxError, match="inside the workspace"):
        get_sandbox("bwrap").run([sys.executable, "-c", "pass"], workspace, readonly_paths=[bad])


@needs_bwrap
def test_the_whole_workspace_can_be_read_only(tmp_path):
    """Grading binds its whole tree read-only: nothing in it can be written, made or removed."""
    workspace = tmp_path / "ws"
    (workspace / "pkg").mkdir(parents=True)
    (workspace / "pkg" / "mod.py").write_text("X = 1\n")
    code = ("import errno, os\n"
            "for attempt in (lambda: open('pkg/mod.py', 'a'), lambda: open('new.py', 'w'), lambda: os.remove('pkg/mod.py'),\n"
            "                lambda: os.mkdir('pkg/__pycache__')):\n"
            "    try:\n        attempt()\n        print('ALLOWED')\n"
            "    except OSError as exc:\n        print(errno.errorcode[exc.errno])\n")
    result = get_sandbox("bwrap").run([sys.executable, "-c", code], workspace, readonly_paths=["."])
    assert result.output.split() == ["EROFS"] * 4, result.output
    assert sorted(p.name for p in workspace.rglob("*") if ".sandbox_home" not in p.parts) == ["mod.py", "pkg"]
