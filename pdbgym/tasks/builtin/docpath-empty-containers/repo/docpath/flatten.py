"""Flatten a document to {path: leaf value}, and rebuild it.

Leaves are scalars (str, int, float, bool, None) and empty containers: an empty list or object
carries information (``"tags": []`` is not the same document as no ``tags`` key).
"""

from __future__ import annotations

from typing import Any

from docpath.paths import Path, format_path, parse_path


def _walk(value: Any, path: Path, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, child in value.items():
            if not isinstance(key, str):
                raise TypeError(f"object keys must be strings, got {key!r} at {format_path(path) or '<root>'}")
            _walk(child, (*path, key), out)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            _walk(child, (*path, index), out)
    else:
        out[format_path(path)] = value


def flatten(document: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _walk(document, (), out)
    return out


def _container_for(part: str | int) -> Any:
    return [] if isinstance(part, int) else {}


def _place(node: Any, part: str | int, value: Any) -> None:
    if isinstance(part, int):
        # Lists are padded, so paths may arrive in any order.
        node.extend([None] * (part + 1 - len(node)))
    node[part] = value


def _child(node: Any, part: str | int, following: str | int) -> Any:
    """The container at ``node[part]``, created to suit the next path part when missing."""
    if isinstance(part, str):
        current = node.get(part)
    else:
        current = node[part] if part < len(node) else None
    if current is None:
        current = _container_for(following)
        _place(node, part, current)
    return current


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for text, leaf in flat.items():
        path = parse_path(text)
        node: Any = root
        for part, following in zip(path, path[1:]):
            node = _child(node, part, following)
        _place(node, path[-1], leaf)
    return root
