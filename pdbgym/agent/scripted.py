"""The reference-patch policy: debugs the way a careful person would, then applies the task's own fix.

It sets a breakpoint at the bug site, runs to it, inspects the frame, views the code, applies each hunk
of the reference patch with ``edit`` (bottom-up, so earlier line numbers stay valid), runs the failing
tests and submits. It exercises every tool, and its transcripts are a known-good trajectory.
"""

from __future__ import annotations

from collections.abc import Iterator

from pdbgym.env.tools import Action
from pdbgym.tasks.model import Task
from pdbgym.tasks.patches import check_patch, parse_patch


def scripted_actions(task: Task) -> Iterator[Action]:
    hunks = parse_patch(task.patch)
    spans = [(h.path, *h.changed_span()) for h in hunks]
    path, first, last, _ = spans[0]
    yield Action("pdb", {"command": f"b {path}:{first}"})
    yield Action("pdb", {"command": "c"})
    yield Action("pdb", {"command": "w"})
    yield Action("pdb", {"command": "a"})
    yield Action("view", {"path": path, "start": max(1, first - 5), "end": max(first, last) + 5})
    for path, first, last, replacement in sorted(spans, key=lambda s: (s[0], -s[1])):
        yield Action("edit", {"path": path, "start": first, "end": last, "new_text": "".join(line + "\n" for line in replacement)})
    yield Action("run_tests", {"which": "failing"})
    yield Action("submit", {})


class ScriptedPolicy:
    """Replays ``scripted_actions``; ``submit`` once the script is exhausted."""

    name = "scripted"
    deterministic = True  # the same state always gives the same action: a point-mass teacher

    def __init__(self, task: Task | None = None) -> None:
        self._actions: Iterator[Action] = iter(())
        if task is not None:
            self.reset(task, "")

    def reset(self, task: Task, observation: str) -> None:
        check_patch(task.patch, task.repo, reference=True)  # the check `tasks validate` makes: no test edits
        self._actions = scripted_actions(task)

    def next_action(self, observation: str) -> Action:
        return next(self._actions, Action("submit", {}))
