"""Which code object a mutant changes, found by comparing compiled code trees (stdlib only, pure).

A mutant that changes only the body of one function (methods and nested functions included) can be
tried in a process that already imported the clean project: give that function's live objects the
mutant's code (``func.__code__ = new``) and run its tests. :func:`plan_patch` finds that function, or
says why the mutant cannot be tried that way (module or class-body code changed, several functions
changed, the shape of the tree changed), in which case the mutant is run the ordinary way, from files.

This module is imported inside the project's test process, so it imports nothing from pdbgym.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from types import CodeType


class Unpatchable(Exception):
    """The mutant cannot be applied by swapping one function's code; the message says why."""


@dataclass(frozen=True)
class Swap:
    """Give every live function whose code is ``clean`` the code ``mutated``. ``own_change``: the
    function's own code differs (not only the code of functions nested in it)."""

    clean: CodeType
    mutated: CodeType
    own_change: bool

    @property
    def key(self) -> tuple[str, int]:
        """(qualified name, first line) of the clean function, which is how live functions are found."""
        return self.clean.co_qualname, self.clean.co_firstlineno


@dataclass(frozen=True)
class PatchPlan:
    """The swaps for one mutant: the changed top-level function or method first, then every function
    nested in it whose code changed (closures made before the swap, such as a decorator's wrappers,
    hold the nested code and are swapped too)."""

    swaps: tuple[Swap, ...]

    @property
    def outer(self) -> Swap:
        return self.swaps[0]


def _is_function(code: CodeType) -> bool:
    return bool(code.co_flags & inspect.CO_NEWLOCALS)


def _same_constant(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))  # type: ignore[arg-type]
    if isinstance(a, tuple | frozenset):
        left, right = (sorted(x, key=repr) for x in (a, b)) if isinstance(a, frozenset) else (a, b)  # type: ignore[arg-type]
        return len(left) == len(right) and all(_same_constant(x, y) for x, y in zip(left, right, strict=True))
    return a == b


def _children(code: CodeType) -> list[CodeType]:
    return [c for c in code.co_consts if isinstance(c, CodeType)]


def _same_own_code(a: CodeType, b: CodeType) -> bool:
    """Equal apart from nested code objects and line numbers (a mutant that changes a line count shifts
    every later function's lines without changing what it does)."""
    own = ("co_code", "co_names", "co_varnames", "co_freevars", "co_cellvars", "co_flags", "co_argcount",
           "co_kwonlyargcount", "co_posonlyargcount", "co_name", "co_qualname", "co_exceptiontable")
    if any(getattr(a, name) != getattr(b, name) for name in own):
        return False
    consts_a = [c for c in a.co_consts if not isinstance(c, CodeType)]
    consts_b = [c for c in b.co_consts if not isinstance(c, CodeType)]
    return len(consts_a) == len(consts_b) and all(_same_constant(x, y) for x, y in zip(consts_a, consts_b, strict=True))


def same_tree(a: CodeType, b: CodeType) -> bool:
    """Equal code trees, line numbers aside."""
    kids_a, kids_b = _children(a), _children(b)
    return (_same_own_code(a, b) and len(kids_a) == len(kids_b)
            and all(same_tree(x, y) for x, y in zip(kids_a, kids_b, strict=True)))


def _changed_swaps(a: CodeType, b: CodeType) -> list[Swap]:
    """Swaps for ``a`` -> ``b`` and every nested function that changed, outer first (trees known to differ)."""
    own = not _same_own_code(a, b)
    kids_a, kids_b = _children(a), _children(b)
    swaps = [Swap(a, b, own or len(kids_a) != len(kids_b))]
    if len(kids_a) == len(kids_b):
        for x, y in zip(kids_a, kids_b, strict=True):
            if _is_function(x) and x.co_qualname == y.co_qualname and not same_tree(x, y):
                swaps.extend(_changed_swaps(x, y))
    return swaps


def plan_patch(clean: CodeType, mutated: CodeType) -> PatchPlan:
    """The swaps that turn the live clean module into the mutant, when the mutant changes one function.

    Raises :class:`Unpatchable` when code outside functions differs (module level, class bodies,
    decorators, default values) or when more or fewer than one top-level function or method differs.
    A swap whose free variables changed can only be applied where no live function has the old code
    (``__code__`` cannot be swapped across closure shapes); the caller checks that."""
    changed: list[tuple[CodeType, CodeType]] = []

    def visit(a: CodeType, b: CodeType) -> None:
        kids_a, kids_b = _children(a), _children(b)
        if not _same_own_code(a, b) or len(kids_a) != len(kids_b):
            raise Unpatchable(f"code outside any function changed (in {a.co_qualname!r})")
        for x, y in zip(kids_a, kids_b, strict=True):
            if _is_function(x) != _is_function(y) or x.co_qualname != y.co_qualname:
                raise Unpatchable(f"the definitions in {a.co_qualname!r} changed")
            if not _is_function(x):
                visit(x, y)  # a class body: look at its methods
            elif not same_tree(x, y):
                changed.append((x, y))

    visit(clean, mutated)
    if len(changed) != 1:
        raise Unpatchable(f"{len(changed)} functions changed; one function's code can be swapped")
    return PatchPlan(tuple(_changed_swaps(*changed[0])))
