"""Workspace paths opened from the host beneath a root descriptor: in-tree links work, nothing leaves."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pdbgym.sandbox import beneath


@pytest.fixture
def tree(tmp_path):
    """``root`` with a package, in-tree links of each kind, links out, and a host file beside it."""
    root = tmp_path / "root"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("inside\n")
    (root / "pkg" / "sub" / "deep.py").write_text("deep\n")
    (tmp_path / "host.txt").write_text("HOST\n")
    os.symlink("pkg/mod.py", root / "to_file")
    os.symlink("pkg", root / "to_dir")
    os.symlink("../mod.py", root / "pkg" / "sub" / "up.py")
    os.symlink("../host.txt", root / "out_relative")
    os.symlink(str(tmp_path / "host.txt"), root / "out_absolute")
    os.symlink("../..", root / "pkg" / "escape")
    os.symlink("loop_b", root / "loop_a")
    os.symlink("loop_a", root / "loop_b")
    return root


@pytest.mark.parametrize("rel, resolved, text", [
    ("pkg/mod.py", "pkg/mod.py", b"inside\n"),
    ("./pkg//mod.py", "pkg/mod.py", b"inside\n"),
    ("pkg/sub/../mod.py", "pkg/mod.py", b"inside\n"),
    ("to_file", "pkg/mod.py", b"inside\n"),
    ("to_dir/sub/deep.py", "pkg/sub/deep.py", b"deep\n"),
    ("pkg/sub/up.py", "pkg/mod.py", b"inside\n"),
])
def test_paths_and_links_inside_the_root_are_read(tree, rel, resolved, text):
    assert beneath.read_bytes(tree, rel, 1000) == (text, resolved)


@pytest.mark.parametrize("rel", ["../host.txt", "pkg/../../host.txt", "/etc/passwd", "out_relative",
                                 "out_absolute", "pkg/escape/host.txt", "a\0b"])
def test_nothing_outside_the_root_is_reached(tree, rel):
    with pytest.raises(beneath.LeavesRoot):
        beneath.read_bytes(tree, rel, 1000)
    with pytest.raises(beneath.LeavesRoot):
        beneath.replace_file(tree, rel, b"x")
    assert (tree.parent / "host.txt").read_text() == "HOST\n"


def test_loops_links_when_not_followed_and_non_files_are_errors(tree):
    with pytest.raises(OSError) as loop:
        beneath.read_bytes(tree, "loop_a", 1000)
    assert loop.value.errno == errno.ELOOP
    with pytest.raises(OSError):
        beneath.read_bytes(tree, "to_dir/mod.py", 1000, follow_links=False)
    with pytest.raises(OSError):
        beneath.read_bytes(tree, "to_file", 1000, follow_links=False)
    with pytest.raises(IsADirectoryError):
        beneath.read_bytes(tree, "to_dir", 1000)
    os.mkfifo(tree / "fifo")  # opened without waiting for a writer, then refused
    with pytest.raises(OSError) as fifo:
        beneath.read_bytes(tree, "fifo", 1000)
    assert fifo.value.errno == errno.EINVAL
    with pytest.raises(OSError) as big:
        beneath.read_bytes(tree, "pkg/mod.py", 3)
    assert big.value.errno == errno.EFBIG


def test_replacing_writes_the_link_target_and_keeps_its_mode(tree):
    os.chmod(tree / "pkg" / "mod.py", 0o750)
    assert beneath.replace_file(tree, "to_file", b"new\n") == "pkg/mod.py"
    assert (tree / "pkg" / "mod.py").read_bytes() == b"new\n"
    assert (tree / "to_file").is_symlink()
    assert (tree / "pkg" / "mod.py").stat().st_mode & 0o7777 == 0o750
    assert sorted(os.listdir(tree / "pkg")) == ["escape", "mod.py", "sub"]


def test_a_failed_write_leaves_the_file_and_no_temporary(tree):
    """The write fails for real (RLIMIT_FSIZE in a child process): the old file stays, no temporary."""
    code = ("import resource, sys; from pdbgym.sandbox import beneath\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4, 4))\n"
            "try:\n    beneath.replace_file(sys.argv[1], 'pkg/mod.py', b'x' * 100)\n"
            "except OSError as exc:\n    print('refused', exc.errno)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tree)], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"refused {errno.EFBIG}", done.stderr
    assert (tree / "pkg" / "mod.py").read_text() == "inside\n"
    assert sorted(os.listdir(tree / "pkg")) == ["escape", "mod.py", "sub"]


def test_listing_reads_modes_without_following(tree):
    resolved, entries = beneath.list_folder(tree, "to_dir")
    assert resolved == "pkg"
    assert [name for name, _ in entries] == ["escape", "mod.py", "sub"]
    assert beneath.kind_beneath(tree, "pkg/escape") == 0  # leads outside: nothing
    assert beneath.kind_beneath(tree, "to_dir") and Path(tree / "to_dir").is_symlink()
