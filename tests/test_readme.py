"""The README's "Using it" commands name real subcommands and flags, and its Python snippet runs.

Each ``pdbgym ...`` line of the section's bash block is split like a shell would, its subcommands are
walked in the click tree behind the typer app, and every ``--flag`` must be one that command accepts,
and every required option present: a renamed or removed flag fails here, not on a reader's machine.
``bench/readme_walkthrough.py`` runs the same lines for real.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from readme_walkthrough import SUBSTITUTIONS, git_status, readme_commands, status_row  # noqa: E402


def _invocations() -> list[list[str]]:
    """Argument lists of every pdbgym call in "Using it" (commands joined by && or ; are split)."""
    calls = []
    for line in readme_commands(ROOT / "README.md"):
        words = shlex.split(line, comments=True)
        current: list[str] = []
        for word in [*words, "&&"]:
            if word in ("&&", ";", "||"):
                if current:
                    assert current[0] == "pdbgym", f"not a pdbgym command in the README: {' '.join(current)}"
                    calls.append(current[1:])
                current = []
            else:
                current.append(word)
    return calls


def _resolve(args: list[str]) -> tuple[Any, list[str], str]:
    """(command, the words after its name, its dotted name) for one argument list."""
    from pdbgym.cli import app

    command = typer.main.get_command(app)
    names = []
    # typer may carry its own copy of click, so groups are told by their commands, not their class
    while hasattr(command, "commands") and args and not args[0].startswith("-"):
        sub = command.commands.get(args[0])
        if sub is None:
            if command.invoke_without_command:
                break
            raise AssertionError(f"'pdbgym {' '.join(names)} {args[0]}' is not a command")
        names.append(args[0])
        command, args = sub, args[1:]
    return command, args, " ".join(names)


def test_the_section_has_the_walkthrough():
    calls = _invocations()
    firsts = {" ".join(call[:2]) for call in calls}
    assert len(calls) >= 20
    for expected in ("tasks split", "cache build", "train corpus", "train sft", "train grpo", "eval select"):
        assert expected in firsts


@pytest.mark.parametrize("args", _invocations(), ids=lambda args: " ".join(args[:2]))
def test_every_flag_is_accepted_and_every_required_one_given(args):
    command, rest, name = _resolve(args)
    accepted = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    used = {word.split("=")[0] for word in rest if word.startswith("--")}
    assert used <= accepted, f"pdbgym {name}: unknown flag(s) {sorted(used - accepted)}"
    for param in command.params:
        if param.required and param.param_type_name == "option":
            assert set(param.opts) & used, f"pdbgym {name}: required {param.opts[0]} missing"


def test_eval_select_reports_on_a_split_the_readme_fills():
    """--report-on test needs a test split: the README's split line must ask for one (--test > 0)."""
    calls = _invocations()
    split = next(call for call in calls if call[:2] == ["tasks", "split"])
    assert "--test" in split, "tasks split leaves the test split empty without --test"
    assert float(split[split.index("--test") + 1]) > 0
    select = next(call for call in calls if call[:2] == ["eval", "select"])
    assert select[select.index("--report-on") + 1] == "test"


def test_every_placeholder_is_in_the_walkthrough_table():
    """A path/to/... or server URL in the block must have a row in SUBSTITUTIONS, or the walkthrough
    would run it verbatim."""
    text = " ".join(readme_commands(ROOT / "README.md"))
    placeholders = set(re.findall(r"path/to/\w+", text)) | set(re.findall(r"https?://[\w.:]+", text))
    assert placeholders <= set(SUBSTITUTIONS), sorted(placeholders - set(SUBSTITUTIONS))


def test_the_python_snippet_runs(tmp_path):
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Using it"):]
    (snippet,) = re.findall(r"```python\n(.*?)```", section[:section.index("\n## ", 1)], flags=re.S)
    script = tmp_path / "snippet.py"
    script.write_text(snippet + "\nprint('OBS', obs[:40] if isinstance(obs, str) else obs, done)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "calc.evaluate" in done.stdout and "\nOBS 2 False" in done.stdout  # reset text, then p 1 + 1


WRITTEN_BY = ("--out", "--json", "--transcript")  # flags of the README's commands that name what they write


def _written_paths() -> set[str]:
    written = set()
    for args in _invocations():
        for index, word in enumerate(args[:-1]):
            if word in WRITTEN_BY:
                written.add(args[index + 1])
        if args[:2] == ["cache", "convert"]:
            written.add(args[3])
        if args[0] == "divergence" and "--json" in args:  # its resume folder sits beside the JSON
            written.add(args[args.index("--json") + 1] + ".work")
    return written


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git clone")
def test_what_the_readme_commands_write_is_ignored_by_git():
    written = sorted(_written_paths())
    assert {"caches/oracle", "splits.json", "kl.json", "summary.json"} <= set(written)
    tracked_or_shown = [path for path in written
                        if subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode != 0]
    assert not tracked_or_shown, f"add to .gitignore: {tracked_or_shown}"


def test_the_walkthrough_fails_when_the_commands_leave_the_clone_dirty(tmp_path):
    """The walkthrough runs the lines in the clone and compares its git status before and after: a path the
    commands write that .gitignore does not cover is a failed row naming it; an ignored one is not."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/runs/\n")
    before = git_status(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "episode.json").write_text("{}")
    assert status_row(before, git_status(tmp_path))[2:] == ("ok", "")
    (tmp_path / "caches" / "oracle").mkdir(parents=True)
    (tmp_path / "caches" / "oracle" / "manifest.json").write_text("{}")
    command, _, result, reason = status_row(before, git_status(tmp_path))
    assert (command, result) == ("git status --porcelain", "failed")
    assert reason == "the commands left in the clone: caches/oracle/manifest.json"
