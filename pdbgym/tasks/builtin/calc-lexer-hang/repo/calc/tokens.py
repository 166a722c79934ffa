"""Token kinds and the patterns that recognise them."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    position: int  # 0-based column of the first character


# Order matters: the first pattern that matches at the current position wins,
# so "**" must come before "*" and numbers before names.
TOKEN_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("NUMBER", re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")),
    ("NAME", re.compile(r"[A-Za-z_][A-Za-z_0-9]*")),
    ("OP", re.compile(r"\*\*|[-+*/%]")),
    ("LPAREN", re.compile(r"\(")),
    ("RPAREN", re.compile(r"\)")),
    ("COMMA", re.compile(r",")),
    ("SPACE", re.compile(r"[ \t\r\n]*")),
]

# Kinds the lexer recognises but does not hand to the parser.
SKIPPED_KINDS = frozenset({"SPACE"})
