"""The one JSONL log: appends of whole lines and the reader every log goes through (a kill's cut line)."""

from __future__ import annotations

import pytest

from pdbgym.errors import PdbgymError
from pdbgym.fileio import JsonlError, append_jsonl, read_jsonl


def test_a_cut_line_costs_only_itself_even_when_appends_follow(tmp_path):
    log = tmp_path / "steps.jsonl"
    append_jsonl(log, [{"step": 1}])
    with open(log, "a") as handle:  # what a kill in the middle of a write leaves
        handle.write('{"step": 2, "loss"')
    append_jsonl(log, [{"step": 3}, {"step": 4}])
    found = read_jsonl(log)
    assert [row["step"] for row in found.rows] == [1, 3, 4]
    assert found.numbers == [1, 3, 4] and found.torn == 1


def test_missing_files_blank_lines_and_non_objects(tmp_path):
    assert read_jsonl(tmp_path / "absent.jsonl").rows == []
    log = tmp_path / "log.jsonl"
    log.write_text('{"a": 1}\n\n[1, 2]\n{"b": 2}\n')
    found = read_jsonl(log)
    assert found.rows == [{"a": 1}, {"b": 2}] and found.numbers == [1, 4] and found.torn == 1


def test_strict_reading_names_the_file_and_line(tmp_path):
    log = tmp_path / "examples.jsonl"
    log.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(JsonlError, match=r"examples.jsonl:2: not JSON") as caught:
        read_jsonl(log, strict=True)
    assert isinstance(caught.value, PdbgymError) and caught.value.where.endswith("examples.jsonl:2")
    log.write_text('"text"\n')
    with pytest.raises(JsonlError, match=r":1: a line must hold a JSON object, not str"):
        read_jsonl(log, strict=True)
