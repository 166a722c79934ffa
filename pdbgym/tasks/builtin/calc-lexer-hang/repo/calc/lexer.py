"""Turn expression text into a list of tokens."""

from __future__ import annotations

from calc.tokens import SKIPPED_KINDS, TOKEN_RULES, Token


class LexError(ValueError):
    """The text holds a character no token rule accepts."""

    def __init__(self, text: str, position: int) -> None:
        self.text = text
        self.position = position
        super().__init__(f"unexpected character {text[position]!r} at column {position + 1}")


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, ending with an END token."""
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        for kind, pattern in TOKEN_RULES:
            match = pattern.match(text, position)
            if match is None:
                continue
            if kind not in SKIPPED_KINDS:
                tokens.append(Token(kind, match.group(), position))
            position = match.end()
            break
        else:
            raise LexError(text, position)
    tokens.append(Token("END", "", len(text)))
    return tokens
