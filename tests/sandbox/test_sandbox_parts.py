"""The pure parts of the sandbox (bounded output) and workspaces."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdbgym.errors import SandboxError
from pdbgym.sandbox import Workspace
from pdbgym.sandbox.output import BoundedOutput


def test_bounded_output_keeps_head_and_tail():
    buffer = BoundedOutput(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrstuvwxyz"):
        buffer.feed(chunk)
    assert bytes(buffer.head) == b"abcde"
    assert bytes(buffer.tail) == b"vwxyz"
    assert buffer.bytes_total == 26 and buffer.bytes_cut == 16
    assert buffer.text() == "abcde\n[... 16 bytes cut ...]\nvwxyz"


def test_bounded_output_below_limit_is_untouched():
    buffer = BoundedOutput(100)
    buffer.feed("héllo\n".encode())
    assert not buffer.truncated and buffer.text() == "héllo\n"


def test_bounded_output_memory_stays_bounded_under_a_flood():
    buffer = BoundedOutput(1000)
    chunk = b"x" * 65536
    for _ in range(2000):  # 131 MB in total
        buffer.feed(chunk)
    assert len(buffer.head) + len(buffer.tail) == 1000
    assert buffer.bytes_total == 2000 * 65536


def test_workspace_is_a_private_copy(tmp_path):
    source = tmp_path / "src"
    (source / "pkg" / "__pycache__").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("x = 1\n")
    (source / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"stale")
    with Workspace.create(source, parent=tmp_path / "ws") as workspace:
        copy = workspace.path / "pkg" / "mod.py"
        assert copy.read_text() == "x = 1\n"
        assert not (workspace.path / "pkg" / "__pycache__").exists()
        copy.write_text("x = 2\n")
        assert (source / "pkg" / "mod.py").read_text() == "x = 1\n"
        root = workspace.path
    assert not root.exists()


def test_workspace_from_missing_folder_is_a_clear_error(tmp_path: Path):
    with pytest.raises(SandboxError, match="not a folder"):
        Workspace.create(tmp_path / "nope")


def test_tree_memory_limit_leaves_headroom_above_the_process_limit():
    from pdbgym.sandbox import Limits
    from pdbgym.sandbox.limits import MIN_TREE_HEADROOM_BYTES

    gib, mib = 1024**3, 1024**2
    assert Limits(memory_bytes=2 * gib).tree_memory_limit == 3 * gib  # 1.5x where that is more
    assert Limits(memory_bytes=256 * mib).tree_memory_limit == 256 * mib + MIN_TREE_HEADROOM_BYTES
    assert Limits(memory_bytes=gib, tree_memory_bytes=4 * gib).tree_memory_limit == 4 * gib
    # A tree limit at or under the process limit would let the OOM killer end a single process before
    # its own limit: refused, naming both.
    for tree in (gib, gib + MIN_TREE_HEADROOM_BYTES - 1, gib // 2):
        with pytest.raises(SandboxError, match=r"must exceed memory_bytes \(1073741824\) by at least"):
            Limits(memory_bytes=gib, tree_memory_bytes=tree)
    with pytest.raises(SandboxError, match="tree_memory_bytes must be positive"):
        Limits(tree_memory_bytes=0)


def test_mounted_python_roots_never_include_the_working_folder():
    import sys

    from pdbgym.sandbox import Limits
    from pdbgym.sandbox.bwrap import BwrapSandbox, package_dir, python_roots
    from pdbgym.sandbox.runtime import runtime_copy

    roots = [Path(root) for root in python_roots()]
    assert Path(sys.base_prefix).resolve() in roots or any(Path(sys.base_prefix).resolve().is_relative_to(r)
                                                           for r in roots)
    # pdbgym's folder (with every task's answer) is never bound; a copy of its runtime modules is.
    assert not any(root.is_relative_to(package_dir()) for root in roots)
    args = BwrapSandbox().wrap(["true"], Path.cwd(), Limits())
    assert any(args[i:i + 3] == ["--ro-bind", str(runtime_copy(package_dir())), str(package_dir())]
               for i in range(len(args)))
    cwd = Path.cwd().resolve()
    assert not any(cwd.is_relative_to(root) for root in roots if root != Path("/")), roots
    assert Path("/root") not in roots and Path("/home") not in roots and Path("/tmp") not in roots


def test_generated_etc_folder_is_shared_and_a_foreign_one_is_not_trusted(tmp_path, monkeypatch):
    import os
    import tempfile

    from pdbgym.sandbox import bwrap

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    bwrap._generated_etc.cache_clear()
    try:
        first = bwrap._generated_etc()
        bwrap._generated_etc.cache_clear()
        assert bwrap._generated_etc() == first  # a second process finds and reuses it
        assert first.parent == tmp_path and f"-{os.getuid()}-" in first.name
        assert "sandbox:x:1000:1000" in (first / "passwd").read_text()
        (first / "passwd").write_text("root::0:0::/:/bin/sh\n")  # tampered, or not ours: not used
        first.chmod(0o777)
        bwrap._generated_etc.cache_clear()
        private = bwrap._generated_etc()
        assert private != first and "sandbox:x:1000:1000" in (private / "passwd").read_text()
    finally:
        bwrap._generated_etc.cache_clear()
