"""Roles, their direct grants, and their parents. Effective permissions are cached per role."""

from __future__ import annotations

from collections.abc import Iterable


class RoleError(ValueError):
    """A role is unknown, duplicated, or would create an inheritance cycle."""


class RoleRegistry:
    def __init__(self) -> None:
        self._grants: dict[str, set[str]] = {}
        self._parents: dict[str, tuple[str, ...]] = {}
        # role -> frozenset of permissions including inherited ones; computing it walks the
        # whole ancestry, and permission checks happen on every request.
        self._effective: dict[str, frozenset[str]] = {}

    def add_role(self, name: str, parents: Iterable[str] = (), grants: Iterable[str] = ()) -> None:
        if name in self._grants:
            raise RoleError(f"role {name!r} already exists")
        parents = tuple(parents)
        for parent in parents:
            self._require(parent)
        self._grants[name] = set(grants)
        self._parents[name] = parents

    def _require(self, role: str) -> None:
        if role not in self._grants:
            raise RoleError(f"unknown role {role!r}")

    def roles(self) -> list[str]:
        return sorted(self._grants)

    def grant(self, role: str, permission: str) -> None:
        self._require(role)
        self._grants[role].add(permission)
        self._invalidate(role)

    def revoke(self, role: str, permission: str) -> None:
        self._require(role)
        self._grants[role].discard(permission)
        self._invalidate(role)

    def _invalidate(self, role: str) -> None:
        self._effective.pop(role, None)

    def ancestors(self, role: str) -> list[str]:
        """The role's parents, grandparents, ... in breadth-first order, without repeats."""
        self._require(role)
        seen: list[str] = []
        queue = list(self._parents[role])
        while queue:
            current = queue.pop(0)
            if current not in seen:
                seen.append(current)
                queue.extend(self._parents[current])
        return seen

    def permissions(self, role: str) -> frozenset[str]:
        if role not in self._effective:
            collected = set(self._grants[role]) if role in self._grants else set()
            for ancestor in self.ancestors(role):
                collected |= self._grants[ancestor]
            self._effective[role] = frozenset(collected)
        return self._effective[role]
