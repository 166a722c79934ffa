"""Shapes of real test suites the hardened run must grade as pytest does: subtests (pytest's ``subtests``
fixture and ``unittest``'s ``subTest``, several ``call`` reports per test), ``conftest.py`` files in
subfolders only (pluggy then calls hooks through ``subset_hook_caller``, which hashes the plugins), a
conftest fixture filling ``doctest_namespace`` for a doctest, and parametrization.

The verdict's rules for subtest records are unit-tested on streams; the project below is graded through
bubblewrap. Before subtest records existed a subtest's report was a second ``call`` report (tampered);
before the report plugin was hashable a subfolder's conftest ended the run in an INTERNALERROR."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pdbgym.grading.grader import grade
from pdbgym.grading.verdict import judge, summary_counts
from pdbgym.sandbox import Workspace, get_sandbox
from pdbgym.tasks.model import load_task
from pdbgym.tasks.patches import apply_patch
from pdbgym.tasks.synth.candidate import reference_patch

needs_bwrap = pytest.mark.skipif(not shutil.which("bwrap"), reason="grading runs under bubblewrap here")
NODES = ["t.py::a", "t.py::b"]


def _stream(*records: dict) -> bytes:
    return b"".join(json.dumps({**r, "seq": i}).encode() + b"\n" for i, r in enumerate(records))


def _test(node: str, call: str = "passed", subtests: tuple[str, ...] = ()) -> list[dict]:
    """A test's records as the plugin sends them: its subtests come between setup and its own call."""
    return [{"kind": "phase", "nodeid": node, "when": "setup", "outcome": "passed"},
            *({"kind": "subtest", "nodeid": node, "outcome": o} for o in subtests),
            {"kind": "phase", "nodeid": node, "when": "call", "outcome": call},
            {"kind": "phase", "nodeid": node, "when": "teardown", "outcome": "passed"}]


def _run(a: list[dict], b: list[dict], status: int, subtests: int) -> list[dict]:
    return [{"kind": "start"}, *a, *b, {"kind": "end", "exitstatus": status, "phases": 6, "subtests": subtests,
                                        "collect_errors": 0, "selfcheck": []}]


def test_subtests_are_their_own_records_and_a_failed_one_fails_its_test():
    honest = _run(_test("t.py::a", subtests=("passed", "passed")), _test("t.py::b"), 0, 2)
    assert judge(_stream(*honest), NODES, 0, False, "..\n2 passed, 2 subtests passed in 0.01s\n") == \
        ({"t.py::a": "passed", "t.py::b": "passed"}, [], [], {})
    # unittest's subTest: the test's own call report passes, one subtest failed; pytest exits 1.
    failed = _run(_test("t.py::a", subtests=("passed", "failed", "skipped")), _test("t.py::b"), 1, 3)
    outcomes, tampered, *_ = judge(_stream(*failed), NODES, 1, False, "1 failed, 2 passed, 1 skipped in 0.01s\n")
    assert outcomes == {"t.py::a": "failed", "t.py::b": "passed"} and tampered == []


def test_no_subtest_record_makes_a_failing_test_pass():
    forged = _run(_test("t.py::a", call="failed", subtests=("passed",) * 5), _test("t.py::b"), 1, 5)
    outcomes, tampered, *_ = judge(_stream(*forged), NODES, 1, False, "F.\n1 failed, 1 passed in 0.01s\n")
    assert outcomes["t.py::a"] == "failed" and tampered == []


@pytest.mark.parametrize("forge, why", [
    (lambda r: r[:2] + [{"kind": "subtest", "nodeid": "t.py::zzz", "outcome": "passed"}] + r[2:], "not asked for"),
    (lambda r: r[:2] + [{"kind": "subtest", "nodeid": "t.py::a", "outcome": "fine"}] + r[2:], "malformed subtest"),
    (lambda r: r[:-1] + [r[-1] | {"subtests": 0}], "subtest records"),
    (lambda r: r[:4] + [r[3]] + r[4:], "second report"),  # a second call phase is still forgery
])
def test_forged_subtest_records_are_tampered(forge, why):
    records = forge(_run(_test("t.py::a", subtests=("passed",)), _test("t.py::b"), 0, 1))
    _, tampered, *_ = judge(_stream(*records), NODES, 0, False)
    assert any(why in t for t in tampered), tampered


def test_pytests_closing_line_with_subtest_counts_is_read():
    assert summary_counts("5 passed, 6 subtests passed in 0.04s") == {"passed": 5, "subtests passed": 6}
    assert summary_counts("1 failed, 3 passed, 2 skipped, 1 xfailed, 4 subtests passed in 0.05s")["failed"] == 1


PROJECT = {
    "pytest.ini": "[pytest]\n",
    "calc/__init__.py": "",
    "calc/ops.py": '''def double(x):
    """
    >>> double(TWO)
    4
    """
    return 2 * x
''',
    # doctest_namespace filled by a conftest beside the doctested module, as libraries do
    "calc/conftest.py": '''import pytest


@pytest.fixture(autouse=True)
def add_names(doctest_namespace):
    doctest_namespace["TWO"] = 2
''',
    # conftest files in subfolders only (none at the root)
    "tests/__init__.py": "",
    "tests/conftest.py": '''import pytest


@pytest.fixture
def three():
    return 3
''',
    "tests/unit/__init__.py": "",
    "tests/unit/conftest.py": '''import pytest


@pytest.fixture
def doubled(three):
    return 2 * three
''',
    "tests/unit/test_ops.py": '''import unittest

import pytest

from calc.ops import double


def test_fixture_from_conftests(three, doubled):
    assert double(three) == doubled


@pytest.mark.parametrize("x, y", [(0, 0), (1, 2), (5, 10)])
def test_parametrized(x, y):
    assert double(x) == y


def test_subtests_fixture(subtests):
    for x in range(4):
        with subtests.test(x=x):
            assert double(x) == x + x


class DoubleTests(unittest.TestCase):
    def test_subtests(self):
        for x in range(4):
            with self.subTest(x=x):
                self.assertEqual(double(x), x * 2)
''',
}
BUGGY = "    return 2 * x if x != 3 else 7\n"  # fails one subtest of each kind, and the conftest fixture test
FAILING = ["tests/unit/test_ops.py::test_fixture_from_conftests", "tests/unit/test_ops.py::test_subtests_fixture",
           "tests/unit/test_ops.py::DoubleTests::test_subtests"]
PASSING = ["calc/ops.py::calc.ops.double", "tests/unit/test_ops.py::test_parametrized[0-0]",
           "tests/unit/test_ops.py::test_parametrized[1-2]", "tests/unit/test_ops.py::test_parametrized[5-10]"]


@pytest.fixture
def subtest_task(tmp_path: Path):
    repo = tmp_path / "task" / "repo"
    for rel, text in PROJECT.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    clean = PROJECT["calc/ops.py"]
    buggy = clean.replace("    return 2 * x\n", BUGGY)
    (repo / "calc" / "ops.py").write_text(buggy)
    (tmp_path / "task" / "task.json").write_text(json.dumps({
        "instance_id": "subtests-and-conftests", "FAIL_TO_PASS": FAILING, "PASS_TO_PASS": PASSING,
        "patch": reference_patch("calc/ops.py", buggy, clean), "test_command": "python -m pytest --doctest-modules"}))
    return load_task(tmp_path / "task")


@needs_bwrap
def test_subtests_subfolder_conftests_and_doctest_namespace_grade_as_pytest_does(subtest_task):
    sandbox = get_sandbox("bwrap")
    with Workspace.create(subtest_task.repo) as ws:
        buggy = grade(subtest_task, ws.path, sandbox)
        apply_patch(ws.path, subtest_task.patch)
        fixed = grade(subtest_task, ws.path, sandbox)
    assert buggy.tampered == [] and fixed.tampered == [], (buggy.tampered, fixed.output[-2000:])
    assert "INTERNALERROR" not in buggy.output + fixed.output
    assert buggy.fail_to_pass == dict.fromkeys(FAILING, "failed"), buggy.output[-2000:]
    assert buggy.pass_to_pass == dict.fromkeys(PASSING, "passed") and not buggy.final_test_passed
    assert fixed.final_test_passed, fixed.output[-2000:]
    assert "subtests passed" in fixed.output  # pytest did run them as subtests
