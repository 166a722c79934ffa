"""Split template source into text, variable and tag tokens."""

from __future__ import annotations

import re
from dataclasses import dataclass

_MARKUP = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.DOTALL)


@dataclass(frozen=True)
class Token:
    kind: str  # "text", "var" or "tag"
    text: str
    line: int  # 1-based line of the token's first character


class TemplateSyntaxError(ValueError):
    """Malformed template source; the message names the line."""


def tokenize(source: str) -> list[Token]:
    """Tokens in source order; var and tag texts are stripped of surrounding spaces."""
    tokens: list[Token] = []
    position = 0
    for match in _MARKUP.finditer(source):
        line = source.count("\n", 0, match.start()) + 1
        if match.start() > position:
            tokens.append(Token("text", source[position:match.start()], source.count("\n", 0, position) + 1))
        if match.group(1) is not None:
            tokens.append(Token("var", match.group(1).strip(), line))
        else:
            tokens.append(Token("tag", match.group(2).strip(), line))
        position = match.end()
    if position < len(source):
        tokens.append(Token("text", source[position:], source.count("\n", 0, position) + 1))
    for token in tokens:
        if token.kind == "text" and ("{{" in token.text or "{%" in token.text):
            raise TemplateSyntaxError(f"line {token.line}: unclosed '{{{{' or '{{%'")
    return tokens
