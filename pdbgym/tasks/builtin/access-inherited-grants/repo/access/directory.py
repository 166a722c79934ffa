"""Users and the roles they hold; answers "may this user do that?"."""

from __future__ import annotations

from fnmatch import fnmatchcase

from access.registry import RoleError, RoleRegistry


class Directory:
    def __init__(self, registry: RoleRegistry) -> None:
        self.registry = registry
        self._roles: dict[str, set[str]] = {}

    def assign(self, user: str, role: str) -> None:
        if role not in self.registry.roles():
            raise RoleError(f"unknown role {role!r}")
        self._roles.setdefault(user, set()).add(role)

    def unassign(self, user: str, role: str) -> None:
        self._roles.get(user, set()).discard(role)

    def permissions(self, user: str) -> frozenset[str]:
        collected: set[str] = set()
        for role in self._roles.get(user, ()):
            collected |= self.registry.permissions(role)
        return frozenset(collected)

    def can(self, user: str, permission: str) -> bool:
        """Grants may use wildcards: 'reports:*' allows 'reports:read' and 'reports:export'."""
        return any(fnmatchcase(permission, granted) for granted in self.permissions(user))
