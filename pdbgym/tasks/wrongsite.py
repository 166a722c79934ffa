"""Wrong-site information of a task, and whether an episode's final edits touched the wrong site.

A task carries wrong-site information when its ``task.json`` has either

* ``wrong_site``: a list of ``{"path": "pkg/mod.py", "function": "name"}`` (explicit), or
* ``wrong_site_patch``: the tempting fix at the symptom site (the regression suite's
  ``symptom_fix_breaks_contract`` tasks); each function that patch changes is a wrong site.

A wrong site is a line span of the task's ORIGINAL ``repo/``: the whole definition of the named (or
patched) function, decorators included, located with ``ast``. A patched line at module level is a
site of its own (that line span, function ``<module>``).

The episode's final edits are the difference between the original file and the file left in the
workspace when the episode ended (``difflib`` line opcodes, in original-file coordinates). An edit
later undone leaves no difference and does not count. The final edits touch a site when

* a replaced or deleted original line lies in the site's span, or
* lines are inserted after original line ``i`` with ``first <= i < last`` (inside the definition),
  or ``i == last`` with the first inserted non-blank line indented deeper than the ``def`` line
  (the body was extended at its end), or ``i == first - 1`` with the last inserted non-blank line a
  decorator (``@...``: the definition was wrapped), or
* the site's file is gone, is no longer a regular file (a link, a folder), or exceeds
  ``MAX_FILE_BYTES`` (it was rewritten wholesale; the agent's file is never followed or read whole).

Precise definition for readers: docs/task-format.md, "Wrong-site information".
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict

from pdbgym.errors import TaskFormatError
from pdbgym.sandbox import beneath
from pdbgym.tasks.model import Task
from pdbgym.tasks.patches import parse_patch

MAX_FILE_BYTES = 2_000_000  # a site file this large in the workspace was rewritten, whatever it holds


@dataclass(frozen=True)
class WrongSite:
    """A line span (1-based, inclusive) of the task's original repo where the tempting fix goes."""

    path: str
    function: str
    first_line: int
    last_line: int
    def_indent: int = 0  # columns of the ``def`` line (to tell an extended body from a new statement)

    def label(self) -> str:
        return f"{self.path}:{self.first_line}-{self.last_line} ({self.function})"


def has_wrong_site_info(task: Task) -> bool:
    """Whether ``task`` declares a wrong site (``wrong_site`` or ``wrong_site_patch`` in task.json)."""
    return bool(task.extra.get("wrong_site") or task.extra.get("wrong_site_patch"))


def _definitions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _site_of(node: ast.FunctionDef | ast.AsyncFunctionDef, path: str) -> WrongSite:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return WrongSite(path, node.name, first, node.end_lineno or node.lineno, node.col_offset)


def _parse(task: Task, path: str) -> ast.Module:
    parts = Path(path).parts
    # task.json is input like any other: a site path may not leave repo/ (nor, later, the workspace).
    if not parts or Path(path).is_absolute() or ".." in parts or "\\" in path:
        raise TaskFormatError(f"{task.instance_id}: wrong site path {path!r} must be relative to repo/, without '..'")
    source = task.repo / path
    if source.is_symlink() or not source.resolve().is_relative_to(task.repo.resolve()):
        raise TaskFormatError(f"{task.instance_id}: wrong site file {path} leads outside the task's repo/")
    if not source.is_file():
        raise TaskFormatError(f"{task.instance_id}: wrong site file {path} is not in the task's repo/")
    try:
        return ast.parse(source.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError as exc:
        raise TaskFormatError(f"{task.instance_id}: wrong site file {path} does not parse: {exc}") from exc


def _declared_sites(task: Task, declared: object) -> list[WrongSite]:
    if not isinstance(declared, list) or not all(isinstance(d, dict) for d in declared):
        raise TaskFormatError(f"{task.instance_id}: wrong_site must be a list of {{\"path\", \"function\"}} objects")
    sites = []
    for entry in declared:
        path, name = entry.get("path"), entry.get("function")
        if not isinstance(path, str) or not isinstance(name, str):
            raise TaskFormatError(f"{task.instance_id}: each wrong_site entry needs string 'path' and 'function'")
        matches = [n for n in _definitions(_parse(task, path)) if n.name == name]
        if len(matches) != 1:
            raise TaskFormatError(f"{task.instance_id}: {path} defines {len(matches)} functions named {name!r}; "
                                  "a wrong_site must name exactly one")
        sites.append(_site_of(matches[0], path))
    return sites


def patched_sites(task: Task, patch: str) -> list[WrongSite]:
    """The innermost function around every line ``patch`` changes (a pure insertion: the line above)."""
    sites: dict[tuple[str, int, int], WrongSite] = {}
    for hunk in parse_patch(patch):
        first, last, _ = hunk.changed_span()
        lines = range(first, last + 1) if last >= first else [max(first - 1, 1)]
        definitions = _definitions(_parse(task, hunk.path))
        for line in lines:
            around = [n for n in definitions if n.lineno <= line <= (n.end_lineno or n.lineno)]
            if around:
                site = _site_of(max(around, key=lambda n: n.lineno), hunk.path)
            else:
                site = WrongSite(hunk.path, "<module>", line, line)
            sites[(site.path, site.first_line, site.last_line)] = site
    return list(sites.values())


def wrong_sites(task: Task) -> list[WrongSite]:
    """The task's wrong sites (``[]`` when it carries no wrong-site information); explicit ones win."""
    if task.extra.get("wrong_site"):
        return _declared_sites(task, task.extra["wrong_site"])
    if task.extra.get("wrong_site_patch"):
        return patched_sites(task, str(task.extra["wrong_site_patch"]))
    return []


def _read_final(workspace: Path, relative: str) -> list[str] | None:
    """The workspace file's lines; None when it is gone, not a regular file, reached through a link
    (a folder on its path replaced by a link to elsewhere), or too large to be an edit. Read through
    folder descriptors (``pdbgym.sandbox.beneath``), so a folder swapped for a link meanwhile is not followed."""
    try:
        data, _ = beneath.read_bytes(workspace, relative, MAX_FILE_BYTES, follow_links=False)
    except OSError:
        return None
    return data.decode("utf-8", errors="replace").splitlines()


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def _touches(site: WrongSite, opcodes: list[tuple[str, int, int, int, int]], final: list[str]) -> bool:
    for tag, i1, i2, j1, j2 in opcodes:
        if tag in ("replace", "delete") and i1 + 1 <= site.last_line and i2 >= site.first_line:
            return True
        if tag == "insert":
            if site.first_line <= i1 < site.last_line:
                return True
            inserted = [line for line in final[j1:j2] if line.strip()]
            if i1 == site.last_line and inserted and _indent(inserted[0]) > site.def_indent:
                return True
            if i1 == site.first_line - 1 and inserted and inserted[-1].lstrip().startswith("@"):
                return True  # a decorator put on the definition
    return False


class WrongSiteOutcome(TypedDict):
    """Whether the final edits touched the task's wrong site (None: the task's wrong-site fields are malformed,
    said in ``error``), its sites and the touched ones, as ``WrongSite.label()`` texts."""

    touched: bool | None
    sites: list[str]
    touched_sites: list[str]
    error: NotRequired[str]


def wrong_site_outcome(task: Task, workspace: Path) -> WrongSiteOutcome | None:
    """``{"touched", "sites", "touched_sites"}`` for the edits left in ``workspace``; None without info.

    ``sites`` and ``touched_sites`` are ``WrongSite.label()`` texts. ``workspace`` is the agent's copy
    of the repo (hostile: links and huge files are judged by ``lstat`` alone, never followed). A task
    whose wrong-site fields are malformed gives ``touched: None`` and the ``error``: the episode ends
    as it would have, and the task drops out of the rate rather than counting as either outcome.
    """
    try:
        sites = wrong_sites(task)
    except TaskFormatError as exc:
        return {"touched": None, "sites": [], "touched_sites": [], "error": str(exc)}
    if not sites:
        return None
    touched: list[str] = []
    for path in sorted({s.path for s in sites}):
        original = (task.repo / path).read_text(encoding="utf-8", errors="replace").splitlines()
        final = _read_final(workspace, path)
        in_file = [s for s in sites if s.path == path]
        if final is None:
            touched += [s.label() for s in in_file]
            continue
        opcodes = difflib.SequenceMatcher(None, original, final, autojunk=False).get_opcodes()
        touched += [s.label() for s in in_file if _touches(s, opcodes, final)]
    return {"touched": bool(touched), "sites": [s.label() for s in sites], "touched_sites": touched}
