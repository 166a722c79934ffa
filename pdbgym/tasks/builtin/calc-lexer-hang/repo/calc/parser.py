"""A recursive-descent evaluator.

Grammar (lowest precedence first)::

    expr    := term (("+" | "-") term)*
    term    := unary (("*" | "/" | "%") unary)*
    unary   := "-" unary | power
    power   := atom ("**" unary)?
    atom    := NUMBER | NAME | NAME "(" args ")" | "(" expr ")"
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from calc.lexer import tokenize
from calc.tokens import Token

FUNCTIONS: dict[str, Callable[..., float]] = {
    "abs": abs,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "round": round,
}


class EvalError(ValueError):
    """The expression is malformed or cannot be evaluated."""


class _Parser:
    def __init__(self, tokens: list[Token], variables: Mapping[str, float]) -> None:
        self.tokens = tokens
        self.index = 0
        self.variables = variables

    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def accept(self, kind: str, text: str | None = None) -> Token | None:
        token = self.current
        if token.kind == kind and (text is None or token.text == text):
            self.index += 1
            return token
        return None

    def expect(self, kind: str, text: str | None = None) -> Token:
        token = self.accept(kind, text)
        if token is None:
            wanted = text or kind
            raise EvalError(f"expected {wanted} at column {self.current.position + 1}")
        return token

    def expr(self) -> float:
        value = self.term()
        while (op := self.accept("OP", "+") or self.accept("OP", "-")) is not None:
            right = self.term()
            value = value + right if op.text == "+" else value - right
        return value

    def term(self) -> float:
        value = self.unary()
        while True:
            op = self.accept("OP", "*") or self.accept("OP", "/") or self.accept("OP", "%")
            if op is None:
                return value
            right = self.unary()
            if op.text != "*" and right == 0:
                raise EvalError(f"division by zero at column {op.position + 1}")
            if op.text == "*":
                value *= right
            elif op.text == "/":
                value /= right
            else:
                value %= right

    def unary(self) -> float:
        if self.accept("OP", "-"):
            return -self.unary()
        return self.power()

    def power(self) -> float:
        base = self.atom()
        if self.accept("OP", "**"):
            return base ** self.unary()
        return base

    def atom(self) -> float:
        if (number := self.accept("NUMBER")) is not None:
            return float(number.text)
        if (name := self.accept("NAME")) is not None:
            if self.accept("LPAREN"):
                return self.call(name)
            if name.text not in self.variables:
                raise EvalError(f"unknown variable {name.text!r} at column {name.position + 1}")
            return float(self.variables[name.text])
        self.expect("LPAREN")
        value = self.expr()
        self.expect("RPAREN")
        return value

    def call(self, name: Token) -> float:
        function = FUNCTIONS.get(name.text)
        if function is None:
            raise EvalError(f"unknown function {name.text!r} at column {name.position + 1}")
        args = []
        if not self.accept("RPAREN"):
            args.append(self.expr())
            while self.accept("COMMA"):
                args.append(self.expr())
            self.expect("RPAREN")
        return float(function(*args))


def evaluate(text: str, variables: Mapping[str, float] | None = None) -> float:
    """Evaluate ``text``; names are looked up in ``variables``."""
    parser = _Parser(tokenize(text), variables or {})
    value = parser.expr()
    if parser.current.kind != "END":
        raise EvalError(f"unexpected {parser.current.text!r} at column {parser.current.position + 1}")
    return value
