import pytest

from access import RoleError, RoleRegistry


def make_registry():
    registry = RoleRegistry()
    registry.add_role("viewer", grants=["reports:read"])
    registry.add_role("editor", parents=["viewer"], grants=["reports:write"])
    registry.add_role("auditor", parents=["viewer"], grants=["audit:read"])
    registry.add_role("admin", parents=["editor", "auditor"], grants=["users:*"])
    return registry


def test_permissions_include_every_ancestor():
    registry = make_registry()
    assert registry.ancestors("admin") == ["editor", "auditor", "viewer"]
    assert registry.permissions("admin") == {"reports:read", "reports:write", "audit:read", "users:*"}


def test_unknown_parent_is_rejected():
    registry = make_registry()
    with pytest.raises(RoleError, match="unknown role 'owner'"):
        registry.add_role("superuser", parents=["owner"])
    with pytest.raises(RoleError, match="already exists"):
        registry.add_role("viewer")


def test_grant_and_revoke_on_the_role_itself():
    registry = make_registry()
    assert "reports:export" not in registry.permissions("editor")
    registry.grant("editor", "reports:export")
    assert "reports:export" in registry.permissions("editor")
    registry.revoke("editor", "reports:export")
    assert "reports:export" not in registry.permissions("editor")
