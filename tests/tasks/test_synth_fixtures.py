"""Tiny real projects written on the fly for the synthesis tests (no network; stdlib + pytest only).

Not a test module itself: it holds the shared project writer (named test_* to live among the synth tests).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

SHOP = textwrap.dedent('''\
    """A tiny shop library."""


    def total(prices, discount=0):
        subtotal = 0
        for price in prices:
            subtotal += price
        if discount > 0:
            subtotal = subtotal - subtotal * discount / 100
        return subtotal


    def clamp(value, low, high):
        if value < low:
            return low
        if value > high:
            return high
        return value


    def is_adult(age):
        return age >= 18


    def count_up(n):
        i = 0
        while i < n:
            i += 1
        return i
''')

TESTS = textwrap.dedent('''\
    from shop import clamp, count_up, is_adult, total


    def test_total_plain():
        assert total([1, 2, 3]) == 6


    def test_total_discount():
        assert total([50, 50], discount=10) == 90


    def test_clamp_low():
        assert clamp(-5, 0, 10) == 0


    def test_clamp_high():
        assert clamp(50, 0, 10) == 10


    def test_clamp_inside():
        assert clamp(5, 0, 10) == 5


    def test_adult_boundary():
        assert is_adult(18)
        assert not is_adult(17)


    def test_count_up():
        assert count_up(3) == 3


    def test_unrelated():
        assert "shop".upper() == "SHOP"
''')


def write_shop(root: Path, tests: str = TESTS, with_tests: bool = True) -> Path:
    """Write the shop project under ``root`` and return its folder."""
    project = root / "shop-project"
    (project / "shop").mkdir(parents=True)
    (project / "shop" / "__init__.py").write_text(SHOP)
    (project / "README.md").write_text("docs are not copied into tasks\n")
    if with_tests:
        (project / "tests").mkdir()
        (project / "tests" / "test_shop.py").write_text(tests)
    return project
