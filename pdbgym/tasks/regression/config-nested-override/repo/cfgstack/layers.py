"""Merge configuration layers: later layers override earlier ones key by key, at any depth."""

from __future__ import annotations

from collections.abc import Mapping

from cfgstack.loader import coerce, section

ENV_PREFIX = "APP__"


def deep_merge(base: dict, override: dict) -> dict:
    """A new dict: ``base`` with every leaf that ``override`` sets replaced; inputs are not changed."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = {**result[key], **value}
        else:
            result[key] = value
    return result


def from_environment(environ: Mapping[str, str]) -> dict:
    """``APP__SERVER__PORT=8080`` -> ``{"server": {"port": 8080}}`` (names lower-cased)."""
    tree: dict = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        *path, leaf = name[len(ENV_PREFIX):].lower().split("__")
        target = section(tree, ".".join(path)) if path else tree
        target[leaf] = coerce(value)
    return tree


def layered(*layers: dict) -> dict:
    """All layers merged in order (the last one wins)."""
    merged: dict = {}
    for layer in layers:
        merged = deep_merge(merged, layer)
    return merged
