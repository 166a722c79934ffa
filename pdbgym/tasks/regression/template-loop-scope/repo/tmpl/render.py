"""Render a template source against a dict of values."""

from __future__ import annotations

from typing import Any

from tmpl.context import MISSING, Context
from tmpl.filters import FILTERS
from tmpl.lexer import tokenize
from tmpl.parser import For, If, Text, Var, parse


class UndefinedVariable(NameError):
    """A template names a variable that is not in scope."""


class UnknownFilter(NameError):
    """A template uses a filter that does not exist."""


def _resolve(path: list[str], context: Context, line: int) -> Any:
    value = context.lookup(path)
    if value is MISSING:
        raise UndefinedVariable(f"line {line}: '{'.'.join(path)}' is not defined")
    return value


def _render_var(node: Var, context: Context) -> str:
    value = _resolve(node.path, context, node.line)
    for name in node.filters:
        if name not in FILTERS:
            raise UnknownFilter(f"line {node.line}: unknown filter '{name}'; known: {', '.join(sorted(FILTERS))}")
        value = FILTERS[name](value)
    return str(value)


def _render_nodes(nodes: list, context: Context) -> str:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            out.append(node.text)
        elif isinstance(node, Var):
            out.append(_render_var(node, context))
        elif isinstance(node, For):
            for item in _resolve(node.iterable, context, node.line):
                out.append(_render_nodes(node.body, context.child({node.name: item})))
        elif isinstance(node, If):
            branch = node.body if _resolve(node.path, context, node.line) else node.orelse
            out.append(_render_nodes(branch, context))
    return "".join(out)


def render(source: str, values: dict[str, Any]) -> str:
    """The rendered text; raises UndefinedVariable / UnknownFilter / TemplateSyntaxError."""
    return _render_nodes(parse(tokenize(source)), Context(values))
