"""The reference patch of a synthesized task: git applies it and gets the clean file back, byte for byte."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pdbgym.tasks.synth.candidate import reference_patch

CASES = {
    "middle line": ("a = 1\nb = 2\nc = 3\n", "a = 1\nb = 3\nc = 3\n"),
    "no newline at the end, last line changed": ("x = 1\ny = 2", "x = 1\ny = 3"),
    "no newline at the end, context only": ("x = 1\ny = 2\nz = 3", "x = 1\ny = 5\nz = 3"),
    "newline added at the end": ("x = 1\ny = 2", "x = 1\ny = 2\n"),
    "form feed and CRLF lines": ("a = 1\x0c\r\nb = 2\r\nc = 3\r\n", "a = 1\x0c\r\nb = 4\r\nc = 3\r\n"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_git_applies_the_patch_and_restores_the_clean_file(case: str, tmp_path: Path) -> None:
    buggy, clean = CASES[case]
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_bytes(buggy.encode())
    patch = reference_patch("pkg/mod.py", buggy, clean)
    assert patch.startswith("diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n")
    done = subprocess.run(["git", "apply", "-p1", "-"], cwd=tmp_path, input=patch.encode(), capture_output=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "pkg" / "mod.py").read_bytes() == clean.encode()


def test_a_one_line_fix_in_a_long_file_of_repeated_lines_is_a_two_line_patch(tmp_path: Path) -> None:
    # difflib's autojunk treats lines repeated often in a file of 200+ lines as junk: this one-line fix
    # came out as a 106-line patch (boltons' namedutils.py: 318 lines), inflating the task's demands
    body = [f"    value_{i % 7} = compute({i % 5})\n" if i % 3 else "\n" for i in range(120)]
    clean = "".join(["def first():\n", *body, "\n", "def second():\n", *body])
    lines = clean.splitlines(keepends=True)
    lines[190] = "    value_x = compute(99)\n"
    buggy = "".join(lines)
    patch = reference_patch("pkg/mod.py", buggy, clean)
    changed = [line for line in patch.splitlines()[3:] if line[:1] in "+-"]
    assert changed == ["-    value_x = compute(99)", "+    value_4 = compute(2)"]
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(buggy)
    done = subprocess.run(["git", "apply", "-p1", "-"], cwd=tmp_path, input=patch.encode(), capture_output=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "pkg" / "mod.py").read_text() == clean
