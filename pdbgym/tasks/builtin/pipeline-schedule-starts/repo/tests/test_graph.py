import pytest

from pipeline import CycleError, Step, topological_order


def test_order_respects_dependencies_and_is_stable():
    steps = [Step("test", 5, ("build",)), Step("build", 3), Step("lint", 1), Step("deploy", 2, ("test", "lint"))]
    assert [s.name for s in topological_order(steps)] == ["build", "lint", "test", "deploy"]


def test_cycle_is_reported():
    steps = [Step("a", 1, ("c",)), Step("b", 1, ("a",)), Step("c", 1, ("b",)), Step("d", 1)]
    with pytest.raises(CycleError, match=r"\['a', 'b', 'c'\]"):
        topological_order(steps)


def test_unknown_dependency():
    with pytest.raises(ValueError, match="unknown steps \\['compile'\\]"):
        topological_order([Step("test", 1, ("compile",))])
