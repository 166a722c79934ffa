"""Help text reads as written: square brackets are text, flags show no value placeholder, and options
that take adapter-store names say so (each was wrong in a newcomer's session)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pdbgym.cli import app


def _help(*words: str) -> str:
    result = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_brackets_in_help_text_are_kept():
    assert "Lay the file's [quick] tables over it" in _help("experiment", "run")


@pytest.mark.parametrize("words", [("experiment", "run"), ("eval",), ("tasks", "import-swebench"), ("train", "grpo")])
def test_flags_show_no_value_placeholder(words):
    text = _help(*words)
    assert "<bool>" not in text and "--help Show this message and exit." in text


def test_student_says_it_takes_store_names():
    assert "adapter-store name such as sft or rl" in _help("divergence")
