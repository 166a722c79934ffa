"""No test asserts that something is fast: a wall-clock bound fails on a loaded machine and proves
nothing on a quiet one. Speed is measured by a script in ``bench/`` against a named baseline in the same
run (docs/benchmarks.md); tests check behaviour. A deadline after which a test fails as hung
(``communicate(timeout=...)``, ``while time.monotonic() < deadline``) is not such an assertion.

Read from the parsed source of every test module: an ``assert`` is refused when the smaller side of one
of its ``<``, ``<=``, ``>``, ``>=`` comparisons is an elapsed time: a difference of clock readings
(``time.monotonic() - started``), a name bound to one in the same module (``took``, ``elapsed``), or a
duration read from a result (``...["seconds"]``, ``result.duration_s``) held under a fixed bound.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CLOCKS = {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "process_time",
          "process_time_ns", "thread_time", "thread_time_ns"}
DURATION = re.compile(r"(^|[_/])(seconds|elapsed|took|duration|wall|latency)(_s|_ms)?$")


def _clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in CLOCKS and isinstance(func.value, ast.Name) and func.value.id == "time"
    return isinstance(func, ast.Name) and func.id in CLOCKS - {"time"}


def _bound_names(tree: ast.AST, value_test) -> set[str]:
    """Names assigned (anywhere in the module) a value for which ``value_test`` holds."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and value_test(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _identifier(node: ast.AST) -> str | None:
    """The last name of ``x``, ``a.b.x`` or ``a["x"]``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    return None


def _fixed_bound(node: ast.AST) -> bool:
    """A number, a constant's name (``STOP_WITHIN_S``) or arithmetic of those."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        return node.id.isupper()
    if isinstance(node, ast.BinOp):
        return _fixed_bound(node.left) and _fixed_bound(node.right)
    return False


def timed_assertions(source: str) -> list[int]:
    """Lines of the asserts in ``source`` that hold an elapsed time under a bound."""
    tree = ast.parse(source)
    readings = _bound_names(tree, _clock_call)

    def reads_clock(node: ast.AST) -> bool:
        return any(_clock_call(n) or (isinstance(n, ast.Name) and n.id in readings) for n in ast.walk(node))

    def difference(node: ast.AST) -> bool:
        return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and reads_clock(node)

    elapsed = _bound_names(tree, difference)

    def elapsed_time(node: ast.AST, other: ast.AST) -> bool:
        if difference(node) or (isinstance(node, ast.Name) and node.id in elapsed):
            return True
        name = _identifier(node)
        return name is not None and bool(DURATION.search(name)) and _fixed_bound(other)

    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            sides = [compare.left, *compare.comparators]
            for left, right, op in zip(sides, sides[1:], compare.ops, strict=False):
                smaller, larger = (left, right) if isinstance(op, (ast.Lt, ast.LtE)) else (right, left)
                if isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) and elapsed_time(smaller, larger):
                    found.append(node.lineno)
    return sorted(set(found))


def test_no_test_asserts_on_wall_clock_time():
    found = [f"{path.relative_to(TESTS.parent)}:{line}" for path in sorted(TESTS.rglob("*.py"))
             for line in timed_assertions(path.read_text())]
    assert found == [], ("these asserts bound an elapsed time; check the behaviour instead and measure the "
                         "duration in a bench/ script against a named baseline (docs/benchmarks.md)")


@pytest.mark.parametrize("source", [
    "import time\nstarted = time.monotonic()\nrun()\nassert time.monotonic() - started < 10\n",
    "from time import perf_counter\nt0 = perf_counter()\nrun()\nelapsed = perf_counter() - t0\nassert elapsed < 2\n",
    "import time\nt0 = time.time()\nrun()\ntook = time.time() - t0\nassert ok and took <= LIMIT_S\n",
    "assert result.status == 'ok' and result.duration_s < 5\n",
    "assert 30 > second.phases['sft']['seconds']\n",
])
def test_the_check_sees_a_bound_on_elapsed_time_in_every_spelling(source):
    assert timed_assertions(source)


@pytest.mark.parametrize("source", [
    "import time\ndeadline = time.monotonic() + 30\nwhile busy():\n    assert time.monotonic() < deadline, 'hung'\n",
    "proc.communicate(timeout=120)\nassert proc.returncode == 0\n",
    "assert row['time/rollout_s'] >= 0.4\n",  # a lower bound: the recorded time covers a known sleep
    "assert outcome.model_seconds > 0 and engine['busy_s'] <= row['time/rollout_s']\n",  # accounting
])
def test_the_check_lets_hang_deadlines_and_timing_accounts_through(source):
    assert timed_assertions(source) == []
