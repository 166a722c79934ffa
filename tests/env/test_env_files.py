"""File tools: edit spans that move breakpoints correctly, and edits that keep the file's mode."""

import os

import pytest

from pdbgym.env.files import edit_lines, edit_string


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("b = 2", "b = 2\nc = 3\n"),  # old ends mid-line, new adds a line
        ("b = 2\n", "b = 2\nc = 3\n"),
        ("b = 2\nc = 3\n", ""),
        ("a = 1\nb = 2", "a = 1"),
        ("b = 2\n", "x = 0\ny = 0\nz = 0\n"),
    ],
)
def test_edit_string_span_matches_the_line_count_change(tmp_path, old, new):
    source = "a = 1\nb = 2\nc = 3\nd = 4\n"
    (tmp_path / "m.py").write_text(source)
    span = edit_string(tmp_path, "m.py", old, new)
    after = (tmp_path / "m.py").read_text()
    assert after == source.replace(old, new, 1)
    delta = after.count("\n") - source.count("\n")
    assert span.new_count - (span.last - span.first + 1) == delta
    assert span.first == source[: source.index(old)].count("\n") + 1


def test_edits_keep_the_file_mode(tmp_path):
    target = tmp_path / "tool.py"
    target.write_text("x = 1\n")
    os.chmod(target, 0o755)
    edit_lines(tmp_path, "tool.py", 1, 1, "x = 2\n")
    assert target.stat().st_mode & 0o777 == 0o755
    edit_string(tmp_path, "tool.py", "x = 2", "x = 3")
    assert target.stat().st_mode & 0o777 == 0o755


def test_links_inside_the_project_still_work_and_links_out_are_refused(tmp_path):
    from pdbgym.env.files import view
    from pdbgym.env.tools import ActionError

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("a = 1\n")
    os.symlink("pkg/mod.py", tmp_path / "alias.py")
    os.symlink("pkg", tmp_path / "src")
    os.symlink("/etc", tmp_path / "etc")
    span = edit_lines(tmp_path, "alias.py", 1, 1, "a = 2\n")
    assert span.path == "pkg/mod.py" and (tmp_path / "pkg" / "mod.py").read_text() == "a = 2\n"
    assert (tmp_path / "alias.py").is_symlink()
    assert view(tmp_path, "src/mod.py").startswith("pkg/mod.py\n")
    assert view(tmp_path, ".").splitlines()[1:] == ["alias.py", "etc", "pkg/", "src/"]
    with pytest.raises(ActionError, match="outside the project"):
        view(tmp_path, "etc/passwd")
