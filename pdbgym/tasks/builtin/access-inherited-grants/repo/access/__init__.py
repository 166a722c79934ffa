"""access: roles that inherit permissions, and users that hold roles."""

from access.directory import Directory
from access.registry import RoleError, RoleRegistry

__all__ = ["Directory", "RoleError", "RoleRegistry"]
