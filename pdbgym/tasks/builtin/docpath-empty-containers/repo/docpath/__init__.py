"""docpath: nested JSON documents <-> flat {path: value} maps, and diffs between documents."""

from docpath.diff import Change, diff
from docpath.flatten import flatten, unflatten
from docpath.paths import format_path, parse_path

__all__ = ["Change", "diff", "flatten", "format_path", "parse_path", "unflatten"]
