"""Finding the one function a mutant changes, from two compilations of a module (pure, no processes)."""

from __future__ import annotations

import textwrap

import pytest

from pdbgym.tasks.synth.hotpatch import Unpatchable, plan_patch

CLEAN = textwrap.dedent('''\
    import functools

    LIMIT = 10


    def helper(x):
        return x + 1


    class Box:
        size = 3

        def grow(self, n):
            total = 0
            for i in range(n):
                total += i
            return total

        @property
        def area(self):
            return self.size * self.size


    class Child(Box):
        def grow(self, n):
            return super().grow(n) + 1

        @property
        def area(self):
            return super().area * 2


    def outer(a):
        def inner(b):
            return a + b
        return inner


    @functools.lru_cache
    def cached(n, default=LIMIT):
        return n < default


    def ratio(x):
        return x / float("nan")
''')


def _plan(mutated: str):
    return plan_patch(compile(CLEAN, "m.py", "exec"), compile(mutated, "m.py", "exec"))


@pytest.mark.parametrize(("old", "new", "swapped"), [
    ("            total += i\n", "            total -= i\n", ["Box.grow"]),
    ("        return self.size * self.size", "        return self.size * self.size + 1", ["Box.area"]),
    # A closure: the outer function (for closures made later) and the nested one (for those made already).
    ("        return a + b", "        return a - b", ["outer", "outer.<locals>.inner"]),
    ("    return n < default", "    return n <= default", ["cached"]),
])
def test_the_changed_function_is_found(old: str, new: str, swapped: list[str]) -> None:
    assert old in CLEAN
    plan = _plan(CLEAN.replace(old, new))
    assert [s.clean.co_qualname for s in plan.swaps] == swapped == [s.mutated.co_qualname for s in plan.swaps]
    assert plan.outer.key == (swapped[0], plan.outer.clean.co_firstlineno)
    assert [s.own_change for s in plan.swaps] == [len(swapped) == 1, *([True] * (len(swapped) - 1))]


def test_a_mutant_that_moves_later_lines_changes_only_its_function() -> None:
    longer = CLEAN.replace("    return x + 1\n", "    y = x\n    return y + 1\n")
    plan = _plan(longer)
    assert [s.clean.co_qualname for s in plan.swaps] == ["helper"]  # later functions moved but did not change


def test_identical_code_with_a_nan_constant_is_unchanged() -> None:
    with pytest.raises(Unpatchable, match="0 functions changed"):
        _plan(CLEAN)


@pytest.mark.parametrize(("old", "new", "reason"), [
    ("LIMIT = 10", "LIMIT = 11", "outside any function"),
    ("def cached(n, default=LIMIT)", "def cached(n, default=LIMIT + 1)", "outside any function"),
    ("@functools.lru_cache\n", "@functools.cache\n", "outside any function"),
    ("    size = 3", "    size = 4", "outside any function"),
    ("    return x + 1", "    return x + 2", "2 functions changed"),
    # A method that stops using super() loses its __class__ cell, which changes how the class body builds it.
    ("        return super().grow(n) + 1", "        return Box.grow(self, n) + 1", "outside any function"),
])
def test_mutants_outside_one_function_body_are_refused(old: str, new: str, reason: str) -> None:
    mutated = CLEAN.replace(old, new)
    if reason == "2 functions changed":
        mutated = mutated.replace("return x / float", "return x // float")
    assert mutated != CLEAN
    with pytest.raises(Unpatchable, match=reason):
        _plan(mutated)
