"""Breakpoint shifting and record scanning: pure functions, checked case by case."""

from __future__ import annotations

import json

from pdbgym.debugger.breakpoints import Breakpoint, Edit, shift_breakpoints, shift_line
from pdbgym.debugger.protocol import RecordScanner


def test_shift_line_before_inside_after():
    grow = Edit("m.py", 10, 12, 5)  # 3 lines became 5
    assert shift_line(9, grow) == 9
    assert shift_line(10, grow) == 10 and shift_line(12, grow) == 12  # rewritten in place
    assert shift_line(13, grow) == 15
    shrink = Edit("m.py", 10, 12, 1)
    assert shift_line(10, shrink) == 10
    assert shift_line(11, shrink) is None and shift_line(12, shrink) is None
    assert shift_line(20, shrink) == 18
    delete = Edit("m.py", 5, 5, 0)
    assert shift_line(5, delete) is None and shift_line(6, delete) == 5
    insert = Edit("m.py", 4, 3, 2)  # two lines inserted before line 4
    assert shift_line(3, insert) == 3 and shift_line(4, insert) == 6


def test_shift_breakpoints_applies_edits_in_order_and_only_to_their_file():
    points = [Breakpoint("a.py", 10, "x > 1"), Breakpoint("a.py", 3), Breakpoint("b.py", 10)]
    edits = [Edit("a.py", 1, 1, 3), Edit("a.py", 5, 5, 0)]  # +2 lines at the top, then delete line 5
    kept, changes = shift_breakpoints(points, edits)
    assert kept == [Breakpoint("a.py", 11, "x > 1"), Breakpoint("b.py", 10)]
    assert (Breakpoint("a.py", 3), None) in changes  # line 3 -> 5 -> deleted
    assert (Breakpoint("a.py", 10, "x > 1"), Breakpoint("a.py", 11, "x > 1")) in changes


def _record(nonce: str, payload: dict) -> bytes:
    return b"\x1e" + nonce.encode() + b" " + json.dumps(payload).encode() + b"\x1f"


def test_scanner_finds_a_record_split_across_reads():
    scanner = RecordScanner("abc123", 1000)
    stream = b"some output\n" + _record("abc123", {"kind": "prompt"}) + b"late"
    records = [scanner.feed(stream[i : i + 3]) for i in range(0, len(stream), 3)]
    assert [r for r in records if r] == [{"kind": "prompt"}]
    text, truncated = scanner.take_output()
    assert text == "some output\n" and not truncated
    scanner.flush()
    assert scanner.take_output()[0] == "late"


def test_scanner_ignores_forged_prompts():
    scanner = RecordScanner("secret", 1000)
    forged = b"(Pdb) " + _record("guess", {"kind": "prompt"}) + b"\n(Pdb) \n"
    assert scanner.feed(forged) is None
    assert scanner.feed(_record("secret", {"kind": "prompt", "breakpoints": []})) == {
        "kind": "prompt", "breakpoints": []}
    assert "(Pdb) " in scanner.take_output()[0]


def test_scanner_bounds_output():
    scanner = RecordScanner("n", 100)
    for _ in range(1000):
        assert scanner.feed(b"z" * 1000) is None
    assert scanner.feed(_record("n", {"kind": "prompt"})) == {"kind": "prompt"}
    text, truncated = scanner.take_output()
    assert truncated and "bytes cut" in text and len(text) < 160
