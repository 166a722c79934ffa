"""Paths like ``servers[0].ports[2]`` <-> ('servers', 0, 'ports', 2)."""

from __future__ import annotations

import re

Path = tuple[str | int, ...]
_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def format_path(path: Path) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def parse_path(text: str) -> Path:
    parts: list[str | int] = []
    position = 0
    while position < len(text):
        if text[position] == "." and parts:
            position += 1
        match = _PART.match(text, position)
        if match is None:
            raise ValueError(f"bad path {text!r} at character {position + 1}")
        name, index = match.groups()
        parts.append(int(index) if index is not None else name)
        position = match.end()
    return tuple(parts)
