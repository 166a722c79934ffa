import pytest

from access import Directory, RoleError, RoleRegistry


def make_directory():
    registry = RoleRegistry()
    registry.add_role("viewer", grants=["reports:read"])
    registry.add_role("editor", parents=["viewer"], grants=["reports:write"])
    registry.add_role("admin", parents=["editor"], grants=["users:*"])
    directory = Directory(registry)
    directory.assign("mia", "viewer")
    directory.assign("raj", "editor")
    directory.assign("ola", "admin")
    return directory


def test_wildcard_grants():
    directory = make_directory()
    assert directory.can("ola", "users:delete")
    assert not directory.can("raj", "users:delete")


def test_assigning_an_unknown_role_fails():
    with pytest.raises(RoleError, match="unknown role 'owner'"):
        make_directory().assign("mia", "owner")


def test_unassigning_removes_access():
    directory = make_directory()
    directory.unassign("raj", "editor")
    assert not directory.can("raj", "reports:read")


def test_new_grant_before_any_check_reaches_everyone():
    directory = make_directory()
    directory.registry.grant("viewer", "dashboards:read")
    assert all(directory.can(user, "dashboards:read") for user in ("mia", "raj", "ola"))


def test_new_grant_on_a_base_role_reaches_users_of_derived_roles():
    directory = make_directory()
    assert not directory.can("raj", "dashboards:read")
    directory.registry.grant("viewer", "dashboards:read")
    assert directory.can("mia", "dashboards:read")
    assert directory.can("raj", "dashboards:read")
    assert directory.can("ola", "dashboards:read")


def test_revoked_base_permission_is_lost_by_derived_roles():
    directory = make_directory()
    assert directory.can("ola", "reports:read")
    directory.registry.revoke("viewer", "reports:read")
    assert not directory.can("ola", "reports:read")
