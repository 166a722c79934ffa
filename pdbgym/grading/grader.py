"""Grading: the agent's source change, applied to a fresh pristine copy of the task, under the task's tests.

The agent controls every file it can write, so grading is built as a security boundary (the threat model
is in docs/sandbox.md, "Grading as a security boundary"). Grading takes the agent's change as source text
(``pdbgym.grading.tree``: the text of changed task files and new ``.py`` files; tests, test
configuration, start-up files, bytecode, hidden and binary files, links and modules that would shadow the
standard library or the test runner are never taken, and each one ignored is listed with its reason),
applies it to a fresh copy of the task's repo, and runs the pristine tests there in a fresh sandbox with
the whole tree read-only (where the sandbox can bind it; elsewhere the test files are re-checked after
the run), through the hardened runner (``pdbgym.grading.testrun``): an isolated interpreter with the
project last on ``sys.path``, no bytecode read or written, and a result channel the kernel keeps in
place and the host judges record by record. Solved means every FAIL_TO_PASS and every PASS_TO_PASS test
passed, the run ended normally and the channel showed no forgery; a test missing from the run counts as
failed; a forged run is tampered.
"""

from __future__ import annotations

import difflib
import re
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from pdbgym.grading.guard import AgentLines
from pdbgym.grading.protect import is_protected_path, protected_digests
from pdbgym.grading.screen import MACHINERY_NAMES, screen_change
from pdbgym.grading.subject import GradedTask
from pdbgym.grading.testrun import run_tests
from pdbgym.grading.tree import TreePlan, build_tree, read_agent_change, read_tree_file
from pdbgym.sandbox import Sandbox
from pdbgym.sandbox.diskguard import EXTRA_BYTES, EXTRA_FILES, DiskGuard

# What the grading run may add to its tree: the episode's default allowance (EnvConfig).
GRADING_EXTRA_BYTES, GRADING_EXTRA_FILES = EXTRA_BYTES, EXTRA_FILES

__all__ = ["GradeResult", "grade", "grading_preview", "is_protected_path"]


class GradingDict(TypedDict, total=False):
    """``GradeResult.to_dict()``, as an episode's result keeps it: every key, or none (``{}``) for an episode
    that was never graded. The tests' outcomes by node id; the files grading took and why it left the others."""

    final_test_passed: bool
    FAIL_TO_PASS: dict[str, str]
    PASS_TO_PASS: dict[str, str]
    changed_files: list[str]
    ignored_files: dict[str, str]
    tampered: list[str]
    refused: list[str]
    diff: str
    timed_out: bool
    duration_s: float
    output: str


@dataclass
class GradeResult:
    """The outcome of grading. ``final_test_passed`` is the reward; nothing the agent says changes it.

    ``ignored_files`` maps each agent change grading did not take to the reason; ``tampered`` lists the
    signs of forgery the result channel showed (non-empty: graded unsolved, the episode ends tampered);
    ``refused`` why the run's ending passed nothing (a signal, the wall clock, no end record or closing
    line; not called forgery, since a crash can be honest); ``diff`` the change graded, as a unified diff.
    """

    final_test_passed: bool
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    pass_to_pass: dict[str, str] = field(default_factory=dict)
    changed_files: list[str] = field(default_factory=list)
    ignored_files: dict[str, str] = field(default_factory=dict)
    tampered: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    diff: str = ""
    output: str = ""
    timed_out: bool = False
    duration_s: float = 0.0

    def to_dict(self) -> GradingDict:
        return {
            "final_test_passed": self.final_test_passed,
            "FAIL_TO_PASS": self.fail_to_pass,
            "PASS_TO_PASS": self.pass_to_pass,
            "changed_files": self.changed_files,
            "ignored_files": self.ignored_files,
            "tampered": self.tampered,
            "refused": self.refused,
            "diff": self.diff,
            "timed_out": self.timed_out,
            "duration_s": round(self.duration_s, 3),
            "output": self.output,
        }


def grading_preview(task: GradedTask, workspace: Path) -> tuple[TreePlan, list[str]]:
    """What grading would take from ``workspace`` now, and what of it the screen calls tampering: read
    from the change alone (no scratch tree), as the agent's every ``run_tests`` asks for it."""
    change = read_agent_change(task.repo, workspace)
    plan = TreePlan(changed=sorted(change.texts), deleted=list(change.deleted), ignored=dict(change.ignored))
    return plan, screen_texts(task.repo, change.texts)


def agent_lines(task_repo: Path, tree: Path, rels: Iterable[str]) -> AgentLines:
    """The lines of each Python file in ``rels`` that the agent wrote (inserted or replaced, numbered in
    ``tree``'s version; a file the task's repo lacks is the agent's whole), for the run's guard. Read
    without following links; a link is left out (the file it names is listed as itself if changed)."""
    lines: AgentLines = {}
    for rel in rels:
        if not rel.endswith(".py"):
            continue
        changed = read_tree_file(tree, rel)
        if changed is None:
            continue
        original = read_tree_file(task_repo, rel)
        if original is None:
            lines[rel] = ((1, 1 << 30),)
            continue
        before, after = original.splitlines(), changed.splitlines()
        matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
        written: list[int] = []
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag not in ("replace", "insert"):
                continue
            kept = _machinery_words("\n".join(before[i1:i2]))
            # A rewritten line that names only machinery its original lines named (the fix of a bug on a
            # line that takes a frame: ``_getframe(1)`` -> ``_getframe(2)``) stays the project's.
            written += [j + 1 for j in range(j1, j2) if not (words := _machinery_words(after[j])) or not words <= kept]
        if written:
            lines[rel] = _spans(written)
    return lines


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _machinery_words(text: str) -> frozenset[str]:
    """The machinery names (``pdbgym.grading.screen.MACHINERY_NAMES``) ``text`` spells literally."""
    return frozenset(w for w in _WORD.findall(text) if w in MACHINERY_NAMES)


def _spans(numbers: list[int]) -> tuple[tuple[int, int], ...]:
    spans: list[tuple[int, int]] = []
    for n in sorted(numbers):
        if spans and spans[-1][1] == n - 1:
            spans[-1] = (spans[-1][0], n)
        else:
            spans.append((n, n))
    return tuple(spans)


def screen_texts(task_repo: Path, texts: dict[str, str]) -> list[str]:
    """The screen (``pdbgym.grading.screen``) of each Python source file of the change, against the task's
    version of it; read before anything runs."""
    return [why for rel, text in sorted(texts.items()) if rel.endswith(".py")
            for why in screen_change(rel, read_tree_file(task_repo, rel), text)]


def grade(task: GradedTask, workspace: Path, sandbox: Sandbox) -> GradeResult:
    """Grade the agent's source change against the task's pristine tests.

    The change is read once from ``workspace`` as source text (``read_agent_change``), applied to a
    fresh copy of the task's repo in the host's temp folder, screened, and the pristine tests run there
    in a fresh sandbox that nothing of the episode ever ran in, a fresh interpreter, the whole tree
    read-only (where the sandbox can bind it) and bytecode neither read nor written. What the run prints
    decides nothing but what pytest's closing line must agree with; an abnormal ending passes nothing
    (``GradeResult.refused``). docs/sandbox.md, "Grading as a security boundary", has the threat model."""
    started = time.perf_counter()
    change = read_agent_change(task.repo, workspace)
    with tempfile.TemporaryDirectory(prefix="pdbgym-grade-") as tmp:
        tree = Path(tmp) / "repo"
        plan = build_tree(task.repo, change, tree)
        screened = screen_texts(task.repo, {rel: change.texts[rel] for rel in plan.changed})
        written = agent_lines(task.repo, tree, plan.changed)
        if sandbox.binds_readonly:
            run = run_tests(sandbox, tree, task, task.all_tests, readonly_paths=[tree], agent_lines=written)
        else:
            # No binds (the plain backend): the tree stays writable, so its growth is capped as an
            # episode's workspace is, and its test files are checked from outside after the run.
            disk = DiskGuard(tree, GRADING_EXTRA_BYTES, GRADING_EXTRA_FILES)
            try:
                run = run_tests(sandbox, tree, task, task.all_tests, agent_lines=written)
            finally:
                disk.stop()
            if disk.watcher.trips:
                peak = (disk.watcher.peak or disk.pristine).describe()
                run.output += f"\n[disk cap] the grading run was stopped: the tree grew to {peak}, over {disk.cap_text()}\n"
        after, before = protected_digests(str(tree)), protected_digests(str(task.repo))
        run.tampered += [f"the run changed test file {rel}" for rel in sorted(set(before) | set(after))
                         if before.get(rel) != after.get(rel) and rel not in plan.ignored]
    outcome = {n: run.outcomes.get(n, "missing") for n in task.all_tests}
    return GradeResult(
        final_test_passed=run.all_passed(task.all_tests) and not screened,
        fail_to_pass={n: outcome[n] for n in task.FAIL_TO_PASS},
        pass_to_pass={n: outcome[n] for n in task.PASS_TO_PASS},
        changed_files=plan.changed + [f"(deleted) {f}" for f in plan.deleted],
        ignored_files=plan.ignored,
        tampered=screened + run.tampered,
        refused=run.refused,
        diff=change.unified_diff(task.repo),
        output=run.output,
        timed_out=run.timed_out,
        duration_s=time.perf_counter() - started,
    )
