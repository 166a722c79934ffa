"""rowcheck: validate rows (dicts of strings) against a declarative schema."""

from rowcheck.schema import Schema, SchemaError
from rowcheck.validate import Problem, validate_rows

__all__ = ["Problem", "Schema", "SchemaError", "validate_rows"]
