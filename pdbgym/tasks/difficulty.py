"""What a task demands, measured from the task itself, and the rung of the task ladder it sits on.

``demands(task)`` reads the reference patch and the failing tests' sources (nothing runs):

- ``patch_lines``: lines the fix adds or removes; ``files``: files it touches; ``hunks``: its hunks;
- ``oracle_actions``: tool calls the scripted oracle needs (``pdbgym.agent.scripted``: break, continue,
  where, args, view, one edit per hunk, run the failing tests, submit = 6 + hunks);
- ``fix_distance``: how far the fix is from the failing test: 0 when the fixed file is the test file,
  1 when a failing test file imports the fixed module, 2 otherwise (reached through other modules);
- ``site_named``: whether the statement the agent is told names the fix's site: a file the patch
  changes (its path or file name) or a function around a changed line, as a whole word. A statement
  that names the site has done the locating for the agent; one that gives the symptom alone has not.

``rung(d)`` orders tasks into a ladder: 0 for a one-line fix in one hunk of a module the test imports,
at a site the statement names; 1 for a small fix (at most 6 lines) in one file; 2 for one file
otherwise; 3 for several files. So a one-line fix the agent has to find from the symptom alone sits on
rung 1. Task families generated for the purpose (``pdbgym.tasks.families``) fill the lowest rungs:
``ladder0`` rung 0, ``ladder1`` and ``symptom`` rung 1; ``tasks split --stratify rung`` keeps each
rung's share alike in every split. ``ladder(tasks)`` tabulates a task set's demands and rungs
(``pdbgym tasks ladder``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TypedDict

from pdbgym.errors import PdbgymError
from pdbgym.sandbox.beneath import read_bytes
from pdbgym.tasks.model import Task
from pdbgym.tasks.patches import parse_patch
from pdbgym.tasks.wrongsite import patched_sites

ORACLE_FIXED_ACTIONS = 6  # break, continue, where, args, view ... run_tests, submit
TEST_FILE_LIMIT = 1 << 20  # bytes of a failing test file read for its imports


class DemandsDict(TypedDict):
    """``Demands.to_dict()`` (task.json's ``demands``): the demands and the rung they put the task on."""

    patch_lines: int
    files: int
    hunks: int
    oracle_actions: int
    fix_distance: int
    site_named: bool
    rung: int


class LadderRow(DemandsDict):
    """One task of ``ladder``: its id and source group, then its demands."""

    instance_id: str
    source: str


class Ladder(TypedDict):
    """``ladder``'s table: each task's row, tasks per rung, per rung of each source group, and the count."""

    tasks: list[LadderRow]
    rungs: dict[int, int]
    by_source: dict[str, dict[int, int]]
    total: int


@dataclass(frozen=True)
class Demands:
    patch_lines: int
    files: int
    hunks: int
    oracle_actions: int
    fix_distance: int
    site_named: bool = True  # the statement names the fixed file or function (unknown: as before, named)

    def to_dict(self) -> DemandsDict:
        return {"patch_lines": self.patch_lines, "files": self.files, "hunks": self.hunks,
                "oracle_actions": self.oracle_actions, "fix_distance": self.fix_distance,
                "site_named": self.site_named, "rung": rung(self)}


def _changed_lines(patch: str) -> int:
    return sum(1 for line in patch.splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---")))


def _module_names(path: str) -> set[str]:
    """Dotted names a test could import ``path`` (a repo-relative .py file) by."""
    parts = PurePosixPath(path).with_suffix("").parts
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return {".".join(parts[i:]) for i in range(len(parts)) if parts[i:]}


def _imports(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def fix_distance(task: Task, fixed_files: list[str]) -> int:
    test_files = {node.split("::", 1)[0] for node in task.FAIL_TO_PASS}
    if test_files & set(fixed_files):
        return 0
    imported: set[str] = set()
    for test_file in test_files:
        try:  # the task's repo is the task's: never follow a link out of it, never read a FIFO or a huge file
            data, _ = read_bytes(task.repo, test_file, TEST_FILE_LIMIT)
        except OSError:
            continue
        imported |= _imports(data.decode(errors="replace"))
    if any(_module_names(f) & imported for f in fixed_files):
        return 1
    return 2


def _named(word: str, text: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(word)}(?![\w])", text) is not None


def site_named(task: Task, fixed_files: list[str]) -> bool:
    """Whether the task's statement names a file the patch changes (its repo path or file name) or a
    function around a changed line (``wrongsite.patched_sites``), each as a whole word. A fixed file that
    cannot be read (gone, a link, not Python) names nothing."""
    statement = task.statement()
    if any(_named(path, statement) or _named(PurePosixPath(path).name, statement) for path in fixed_files):
        return True
    try:
        functions = {site.function for site in patched_sites(task, task.patch)} - {"<module>"}
    except (PdbgymError, OSError, ValueError):
        return False
    return any(_named(name, statement) for name in functions)


def demands(task: Task) -> Demands:
    hunks = parse_patch(task.patch)
    files = sorted({h.path for h in hunks})
    return Demands(patch_lines=_changed_lines(task.patch), files=len(files), hunks=len(hunks),
                   oracle_actions=ORACLE_FIXED_ACTIONS + len(hunks), fix_distance=fix_distance(task, files),
                   site_named=site_named(task, files))


def rung(d: Demands) -> int:
    if d.files > 1:
        return 3
    if d.hunks == 1 and d.patch_lines <= 2 and d.fix_distance <= 1 and d.site_named:
        return 0
    if d.patch_lines <= 6:
        return 1
    return 2


RUNGS = (0, 1, 2, 3)


def source_group(task: Task) -> str:
    """The project a task came from: its ``source``, with a generated family's per-task module cut off."""
    source = task.source or "-"
    return source.split("/", 1)[0] if source.startswith("family:") else source


def ladder(tasks: list[Task]) -> Ladder:
    """Each task's demands and rung, and how many tasks sit on each rung, overall and per source group.

    Returns ``{"tasks": [{instance_id, source, patch_lines, ..., rung}], "rungs": {rung: count},
    "by_source": {source_group: {rung: count}}, "total": n}``; every rung of ``RUNGS`` is present.
    """
    rows: list[LadderRow] = [{"instance_id": task.instance_id, "source": source_group(task), **demands(task).to_dict()}
                             for task in tasks]
    by_source: dict[str, dict[int, int]] = {}
    for row in rows:
        counts = by_source.setdefault(row["source"], dict.fromkeys(RUNGS, 0))
        counts[row["rung"]] += 1
    totals = {level: sum(1 for row in rows if row["rung"] == level) for level in RUNGS}
    return {"tasks": rows, "rungs": totals, "by_source": dict(sorted(by_source.items())), "total": len(rows)}
