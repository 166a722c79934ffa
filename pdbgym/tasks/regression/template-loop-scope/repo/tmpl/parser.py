"""Build a node tree from tokens."""

from __future__ import annotations

from dataclasses import dataclass, field

from tmpl.lexer import TemplateSyntaxError, Token


@dataclass
class Text:
    text: str


@dataclass
class Var:
    path: list[str]
    filters: list[str]
    line: int


@dataclass
class For:
    name: str
    iterable: list[str]
    body: list = field(default_factory=list)
    line: int = 0


@dataclass
class If:
    path: list[str]
    body: list = field(default_factory=list)
    orelse: list = field(default_factory=list)
    line: int = 0


def _var(token: Token) -> Var:
    expression, *filters = [part.strip() for part in token.text.split("|")]
    if not expression:
        raise TemplateSyntaxError(f"line {token.line}: empty expression")
    return Var(expression.split("."), filters, token.line)


def parse(tokens: list[Token]) -> list:
    """Nodes of the whole template; raises TemplateSyntaxError on unbalanced blocks."""
    root: list = []
    stack: list[tuple[object, list]] = [(None, root)]
    for token in tokens:
        body = stack[-1][1]
        if token.kind == "text":
            body.append(Text(token.text))
        elif token.kind == "var":
            body.append(_var(token))
        else:
            words = token.text.split()
            keyword = words[0] if words else ""
            if keyword == "for" and len(words) == 4 and words[2] == "in":
                node = For(words[1], words[3].split("."), line=token.line)
                body.append(node)
                stack.append((node, node.body))
            elif keyword == "if" and len(words) == 2:
                node = If(words[1].split("."), line=token.line)
                body.append(node)
                stack.append((node, node.body))
            elif keyword == "else" and isinstance(stack[-1][0], If):
                stack[-1] = (stack[-1][0], stack[-1][0].orelse)
            elif keyword in ("endfor", "endif") and len(stack) > 1:
                stack.pop()
            else:
                raise TemplateSyntaxError(f"line {token.line}: unexpected tag {{% {token.text} %}}")
    if len(stack) > 1:
        raise TemplateSyntaxError(f"block opened on line {stack[-1][0].line} is never closed")
    return root
