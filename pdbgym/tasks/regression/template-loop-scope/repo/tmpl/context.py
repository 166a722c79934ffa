"""Variable scopes: a loop body sees its loop variable plus everything visible outside the loop."""

from __future__ import annotations

from typing import Any

MISSING = object()


class Context:
    def __init__(self, values: dict[str, Any], parent: Context | None = None) -> None:
        self.values = values
        self.parent = parent

    def child(self, values: dict[str, Any]) -> Context:
        """A nested scope for a block; names in ``values`` shadow outer ones."""
        return Context(values, self.parent)

    def lookup(self, path: list[str]) -> Any:
        """The value at a dotted path (dict keys or attributes), or MISSING."""
        scope: Context | None = self
        while scope is not None and path[0] not in scope.values:
            scope = scope.parent
        if scope is None:
            return MISSING
        value = scope.values[path[0]]
        for part in path[1:]:
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif hasattr(value, part):
                value = getattr(value, part)
            else:
                return MISSING
        return value
