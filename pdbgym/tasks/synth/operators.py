"""AST mutation operators that turn correct Python into realistically buggy Python (pure: no I/O).

A mutation *site* names one node inside one function body and one variant of one operator. Sites are
cheap to enumerate; :func:`render_mutation` turns a site into new source text by splicing only the
changed node's span, so the rest of the file (comments, formatting) is untouched and the reference
patch is a small diff. Every rendered mutant is re-parsed and its function's AST compared with the
intended AST, so a splice that changed meaning through precedence is retried with parentheses or
dropped, never emitted.

Only function bodies are mutated: module-level code, class bodies, decorators, default values,
annotations and docstrings are left alone, since bugs there break imports or are trivially obvious.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pdbgym.errors import PdbgymError


class MutationError(PdbgymError):
    """A mutation site could not be rendered into valid source (it is skipped, never written)."""


@dataclass(frozen=True)
class MutationSite:
    """One candidate bug: operator ``operator`` (variant ``variant``) at node ``node_index`` of a function.

    ``node_index`` counts nodes in :func:`walk_body` order within the function named ``function``
    (qualified, e.g. ``"Cache.get"``) whose code starts at line ``function_line`` (the first
    decorator's line when decorated, matching ``code.co_firstlineno``).
    """

    file: str
    function: str
    function_line: int
    operator: str
    node_index: int
    variant: int
    line: int

    @property
    def key(self) -> str:
        """Stable identifier, used for resumption, ordering and task ids."""
        return f"{self.file}:{self.function_line}:{self.function}:{self.node_index}:{self.operator}:{self.variant}"


@dataclass(frozen=True)
class Mutation:
    """A rendered mutant: the whole new file text and a one-line human description."""

    site: MutationSite
    source: str
    description: str


FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_SKIP_FIELDS = {"annotation", "returns", "type_comment", "decorator_list"}


def iter_functions(module: ast.Module) -> Iterator[tuple[str, FunctionNode]]:
    """Every function and method in ``module`` with its qualified name, outer before inner."""

    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, FunctionNode]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                yield name, child
                yield from visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")
            elif not isinstance(child, ast.Lambda):
                yield from visit(child, prefix)

    yield from visit(module, "")


def function_first_line(func: FunctionNode) -> int:
    """The line ``code.co_firstlineno`` reports for this function (first decorator when decorated)."""
    return min([func.lineno, *(d.lineno for d in func.decorator_list)])


def walk_body(func: FunctionNode) -> list[ast.AST]:
    """Nodes of ``func``'s own body in a fixed order, skipping nested functions/classes and docstrings."""
    order: list[ast.AST] = []

    def visit(node: ast.AST) -> None:
        order.append(node)
        for name, value in ast.iter_fields(node):
            # A lambda's parameter list (defaults included) is not body code; a call's ``args`` is.
            if name in _SKIP_FIELDS or (name == "args" and isinstance(node, ast.Lambda)):
                continue
            children = value if isinstance(value, list) else [value]
            for child in children:
                if isinstance(child, ast.AST) and not isinstance(
                    child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
                ):
                    visit(child)

    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    for statement in body:
        if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            visit(statement)
    return order


@dataclass
class Scope:
    """What operators need to know about the enclosing function."""

    parameters: list[str]
    assigned_lines: dict[str, int]  # local name -> first line it is bound on
    function_name: str


def scope_of(func: FunctionNode) -> Scope:
    args = func.args
    parameters = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    for extra in (args.vararg, args.kwarg):
        if extra is not None:
            parameters.append(extra.arg)
    assigned: dict[str, int] = {}
    for node in walk_body(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            assigned[node.id] = min(assigned.get(node.id, node.lineno), node.lineno)
    return Scope(parameters, assigned, func.name)


# An operator maps (node, scope) to replacements: (target node to replace, new node or None to delete, text).
Replacement = tuple[ast.AST, ast.AST | None, str]
Operator = Callable[[ast.AST, Scope], list[Replacement]]

_BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
_ORDERED_COMPARE = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift)


def _boundary_comparison(node: ast.AST, scope: Scope) -> list[Replacement]:
    if not isinstance(node, ast.Compare):
        return []
    out: list[Replacement] = []
    for position, op in enumerate(node.ops):
        if type(op) in _BOUNDARY:
            new = copy.deepcopy(node)
            new.ops[position] = _BOUNDARY[type(op)]()
            out.append((node, new, f"comparison {ast.unparse(node)!r} became {ast.unparse(new)!r}"))
    return out


def _off_by_one(node: ast.AST, scope: Scope) -> list[Replacement]:
    if not (isinstance(node, ast.Constant) and type(node.value) is int):
        return []
    return [(node, _int_literal(node.value + delta), f"constant {node.value} became {node.value + delta}")
            for delta in (1, -1)]


def _int_literal(value: int) -> ast.expr:
    """The AST that source text for ``value`` parses to (a negative literal is unary minus)."""
    if value < 0:
        return ast.UnaryOp(op=ast.USub(), operand=ast.Constant(-value))
    return ast.Constant(value)


def _swapped_operands(node: ast.AST, scope: Scope) -> list[Replacement]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, _NON_COMMUTATIVE):
        new: ast.AST = ast.BinOp(left=copy.deepcopy(node.right), op=node.op, right=copy.deepcopy(node.left))
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], _ORDERED_COMPARE):
        new = ast.Compare(left=copy.deepcopy(node.comparators[0]), ops=node.ops,
                          comparators=[copy.deepcopy(node.left)])
    else:
        return []
    if ast.dump(new) == ast.dump(node):
        return []
    return [(node, new, f"operands swapped: {ast.unparse(node)!r} became {ast.unparse(new)!r}")]


def _wrong_variable(node: ast.AST, scope: Scope) -> list[Replacement]:
    if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
        return []
    known = set(scope.parameters) | set(scope.assigned_lines)
    if node.id not in known or node.id in ("self", "cls"):
        return []
    # Only names already bound above this line, so the bug is a wrong value, not an UnboundLocalError.
    bound = [name for name in sorted(known) if name != node.id and name not in ("self", "cls")
             and (name in scope.parameters or scope.assigned_lines.get(name, 10**9) < node.lineno)]
    return [(node, ast.Name(id=name, ctx=ast.Load()), f"variable {node.id!r} replaced by {name!r}")
            for name in bound]


def _removed_condition(node: ast.AST, scope: Scope) -> list[Replacement]:
    if not isinstance(node, ast.BoolOp):
        return []
    out: list[Replacement] = []
    for dropped in range(len(node.values)):
        kept = [copy.deepcopy(v) for i, v in enumerate(node.values) if i != dropped]
        new = kept[0] if len(kept) == 1 else ast.BoolOp(op=node.op, values=kept)
        out.append((node, new, f"condition {ast.unparse(node.values[dropped])!r} dropped"))
    return out


def _removed_guard(node: ast.AST, scope: Scope) -> list[Replacement]:
    guard_exits = (ast.Raise, ast.Return, ast.Continue, ast.Break)
    if isinstance(node, ast.If) and not node.orelse and len(node.body) == 1 and isinstance(node.body[0], guard_exits):
        return [(node, None, f"guard 'if {ast.unparse(node.test)}' removed")]
    return []


def _removed_assignment(node: ast.AST, scope: Scope) -> list[Replacement]:
    if isinstance(node, ast.AugAssign):
        return [(node, None, f"update {ast.unparse(node)!r} removed")]
    if not isinstance(node, ast.Assign):
        return []
    for target in node.targets:
        if isinstance(target, ast.Name):
            # Only re-bindings: removing a first binding gives a NameError, an obvious bug.
            earlier = target.id in scope.parameters or scope.assigned_lines.get(target.id, node.lineno) < node.lineno
            if not earlier:
                return []
        elif isinstance(target, ast.Attribute):
            if scope.function_name == "__init__":
                return []
        else:
            return []
    return [(node, None, f"assignment {ast.unparse(node)!r} removed")]


def _inverted_if(node: ast.AST, scope: Scope) -> list[Replacement]:
    if not isinstance(node, ast.If):
        return []
    test = node.test
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        new: ast.AST = copy.deepcopy(test.operand)
    else:
        new = ast.UnaryOp(op=ast.Not(), operand=copy.deepcopy(test))
    return [(test, new, f"condition inverted: {ast.unparse(test)!r} became {ast.unparse(new)!r}")]


def _swapped_bool_op(node: ast.AST, scope: Scope) -> list[Replacement]:
    if not isinstance(node, ast.BoolOp):
        return []
    new = ast.BoolOp(op=ast.Or() if isinstance(node.op, ast.And) else ast.And(),
                     values=copy.deepcopy(node.values))
    return [(node, new, f"boolean operator swapped: {ast.unparse(node)!r} became {ast.unparse(new)!r}")]


def _wrong_return(node: ast.AST, scope: Scope) -> list[Replacement]:
    if not isinstance(node, ast.Return) or node.value is None:
        return []
    value = node.value
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        return [(value, ast.Constant(not value.value), f"return {value.value} became return {not value.value}")]
    candidates = [p for p in scope.parameters if p not in ("self", "cls")]
    if isinstance(value, ast.Constant) or not candidates:
        return []
    if isinstance(value, ast.Name) and value.id == candidates[0]:
        return []
    return [(value, ast.Name(id=candidates[0], ctx=ast.Load()),
             f"returns its argument {candidates[0]!r} instead of {ast.unparse(value)!r}")]


OPERATORS: dict[str, Operator] = {
    "boundary_comparison": _boundary_comparison,
    "off_by_one": _off_by_one,
    "swapped_operands": _swapped_operands,
    "wrong_variable": _wrong_variable,
    "removed_condition": _removed_condition,
    "removed_guard": _removed_guard,
    "removed_assignment": _removed_assignment,
    "inverted_if": _inverted_if,
    "swapped_bool_op": _swapped_bool_op,
    "wrong_return": _wrong_return,
}


def enumerate_sites(source: str, relpath: str, operators: list[str] | None = None) -> list[MutationSite]:
    """Every mutation site in one file, in a fixed order. Raises MutationError if it does not parse."""
    names = operators or list(OPERATORS)
    unknown = sorted(set(names) - set(OPERATORS))
    if unknown:
        raise MutationError(f"unknown mutation operator(s) {unknown}; choose from {sorted(OPERATORS)}")
    try:
        module = ast.parse(source)
    except SyntaxError as exc:
        raise MutationError(f"{relpath}: does not parse ({exc.msg}, line {exc.lineno})") from exc
    sites: list[MutationSite] = []
    for qualname, func in iter_functions(module):
        scope = scope_of(func)
        for index, node in enumerate(walk_body(func)):
            for name in names:
                for variant, _ in enumerate(OPERATORS[name](node, scope)):
                    sites.append(MutationSite(relpath, qualname, function_first_line(func), name, index, variant,
                                              getattr(node, "lineno", func.lineno)))
    return sites
