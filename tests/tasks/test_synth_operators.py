"""Mutation operators on small code: the intended change, valid syntax, determinism, and what is skipped."""

from __future__ import annotations

import ast
import textwrap

import pytest

from pdbgym.tasks.synth.operators import OPERATORS, MutationError, enumerate_sites
from pdbgym.tasks.synth.splice import render_mutation

SAMPLE = textwrap.dedent('''\
    """Module docstring with 1 < 2 inside it."""
    LIMIT = 10  # module level: never mutated
    if LIMIT > 3:
        BIG = True


    def clamp(value, low, high):
        """Docstring: keep value within [low, high]."""
        if value < low:  # keep this comment
            return low
        result = value
        result = min(result, high)
        return result


    def window(items, size):
        total = 0
        for index in range(len(items) - size):
            total += items[index]
        return total > 0 and size >= 1


    class Box:
        def fits(self, width, height):
            if width <= 0 or height <= 0:
                raise ValueError("empty box")
            return width - height
''')


def _mutants(operator: str) -> list[tuple[str, str]]:
    sites = [s for s in enumerate_sites(SAMPLE, "sample.py", [operator])]
    return [(render_mutation(SAMPLE, s).source, render_mutation(SAMPLE, s).description) for s in sites]


def _changed_lines(mutant: str) -> list[tuple[str, str]]:
    before, after = SAMPLE.splitlines(), mutant.splitlines()
    return [(b, a) for b, a in zip(before, after, strict=False) if b != a]


@pytest.mark.parametrize(
    ("operator", "before", "after"),
    [
        ("boundary_comparison", "    if value < low:  # keep this comment", "    if value <= low:  # keep this comment"),
        ("off_by_one", "    total = 0", "    total = 1"),
        ("swapped_operands", "        return width - height", "        return height - width"),
        ("inverted_if", "    if value < low:  # keep this comment", "    if not value < low:  # keep this comment"),
        ("swapped_bool_op", "    return total > 0 and size >= 1", "    return total > 0 or size >= 1"),
        ("removed_condition", "        if width <= 0 or height <= 0:", "        if height <= 0:"),
        ("wrong_variable", "    result = min(result, high)", "    result = min(low, high)"),
    ],
)
def test_operator_makes_the_intended_one_line_change(operator: str, before: str, after: str) -> None:
    changes = [_changed_lines(source) for source, _ in _mutants(operator)]
    assert [(before, after)] in changes, f"{operator} never produced {after!r}; got {changes}"


def test_removal_operators_delete_whole_statements() -> None:
    guard = [s for s, _ in _mutants("removed_guard")]
    assert any("raise ValueError" not in s and "if width <= 0" not in s for s in guard)
    assigned = [s for s, _ in _mutants("removed_assignment")]
    # Re-bindings and updates go; the first binding of ``result`` and ``total`` never does (NameError).
    assert any("result = min(result, high)" not in s for s in assigned)
    assert any("total += items[index]" not in s for s in assigned)
    assert all("result = value" in s and "total = 0" in s for s in assigned)


def test_wrong_return_flips_booleans_or_returns_an_argument() -> None:
    descriptions = [d for _, d in _mutants("wrong_return")]
    assert any("returns its argument 'value' instead of 'low'" in d for d in descriptions)
    assert any("returns its argument 'items'" in d for d in descriptions)


def test_every_mutant_parses_differs_and_keeps_the_rest_of_the_file() -> None:
    for operator in OPERATORS:
        for source, _ in _mutants(operator):
            tree = ast.parse(source)
            assert ast.dump(tree) != ast.dump(ast.parse(SAMPLE)), operator
            # Comments and module-level code survive: only the function body changed.
            assert "LIMIT = 10  # module level: never mutated" in source
            assert '"""Module docstring with 1 < 2 inside it."""' in source
            assert '"""Docstring: keep value within [low, high]."""' in source


def test_module_level_code_docstrings_and_class_bodies_are_not_sites() -> None:
    sites = enumerate_sites(SAMPLE, "sample.py")
    assert sites, "the functions have sites"
    assert {s.function for s in sites} <= {"clamp", "window", "Box.fits"}
    assert all(s.line >= 7 for s in sites)


def test_enumeration_and_rendering_are_deterministic() -> None:
    first = enumerate_sites(SAMPLE, "sample.py")
    second = enumerate_sites(SAMPLE, "sample.py")
    assert [s.key for s in first] == [s.key for s in second]
    assert len({s.key for s in first}) == len(first), "site keys are unique"
    assert all(render_mutation(SAMPLE, s).source == render_mutation(SAMPLE, s).source for s in first[:20])


def test_precedence_is_preserved_with_parentheses() -> None:
    code = "def f(a, b, c):\n    return a and b or c\n"
    sites = enumerate_sites(code, "p.py", ["swapped_bool_op"])
    rendered = {render_mutation(code, s).source.splitlines()[1].strip() for s in sites}
    # Swapping the inner ``and`` must not silently merge into the outer ``or`` chain.
    assert "return (a or b) or c" in rendered
    assert "return (a and b) and c" in rendered


def test_negative_constants_and_else_branches_render() -> None:
    code = "def f(x):\n    if x:\n        y = 1\n    else:\n        y = 0\n        y = 2\n    return y - 0\n"
    zero_minus = [render_mutation(code, s).source for s in enumerate_sites(code, "n.py", ["off_by_one"])]
    assert any("return y - -1" in s for s in zero_minus)
    removed = [render_mutation(code, s).source for s in enumerate_sites(code, "n.py", ["removed_assignment"])]
    assert any("y = 2" not in s for s in removed)
    for source in zero_minus + removed:
        compile(source, "n.py", "exec")


def test_unparsable_source_and_unknown_operator_raise_clear_errors() -> None:
    with pytest.raises(MutationError, match="does not parse"):
        enumerate_sites("def broken(:\n    pass\n", "broken.py")
    with pytest.raises(MutationError, match="unknown mutation operator"):
        enumerate_sites(SAMPLE, "sample.py", ["no_such_operator"])


def test_untouched_subexpressions_keep_their_original_text() -> None:
    code = "def f(sep, text):\n    return re_sub(r'%s{2,}' % sep, text)\n"
    swapped = [render_mutation(code, s).source for s in enumerate_sites(code, "r.py", ["swapped_operands"])]
    # ast.unparse alone would turn r'%s{2,}' into '%s{2,}', leaking a second change into the diff.
    assert swapped == ["def f(sep, text):\n    return re_sub(sep % r'%s{2,}', text)\n"]
