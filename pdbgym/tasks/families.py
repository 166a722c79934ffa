"""Task families generated for the task ladder's lowest rungs: many small, regular, real tasks.

A family writes ``count`` task folders (each a small Python package with its own pytest suite, a
failing test, a passing one and the one-line reference fix) that ``tasks validate`` accepts like any
other task. Variants differ by package and function names, operands and the operator swapped, chosen
from ``seed``; each task's ``source`` names its own module, so ``tasks split`` (grouped by source
module) never puts two variants of one project on both sides of a split.

- ``ladder0`` (rung 0): the bug is the wrong operator on the function's return line, in the module the
  test imports; the statement names the function and the wrong and right results.
- ``ladder1`` (rung 1): the same kind of bug one call away: in a helper module that the tested module
  imports, at a line that varies, with the statement naming only the tested function.
- ``symptom`` (rung 1): a two-module project with one wrong line of five kinds (off by one, a wrong
  comparison, default, key, or arguments swapped), told by its symptom and failing tests alone
  (``pdbgym.tasks.symptoms``); each task's ``source_module`` is its project template, so a split by
  source module keeps a template's variants on one side.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import NotRequired, TypedDict

from pdbgym.errors import PdbgymError
from pdbgym.fileio import JSONValue
from pdbgym.tasks.difficulty import demands
from pdbgym.tasks.model import load_task, write_task
from pdbgym.tasks.symptoms import SITES, TEMPLATES

OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
VERBS = {"+": ("total", "combine", "sum_of", "joined", "plus"),
         "-": ("difference", "remaining", "gap", "minus", "left_over"),
         "*": ("product", "scaled", "area", "times", "multiplied")}
NOUNS = ("ledger", "basket", "meter", "tally", "grid", "stock", "budget", "span", "quota", "score", "crate",
         "orbit", "relay", "prism", "harbor", "canvas", "pantry", "atlas", "beacon", "cipher")


class FamilyError(PdbgymError):
    """A family name that does not exist, or a count or folder that cannot be used."""


def _diff(path: str, before: list[str], after: list[str], line: int) -> str:
    """A one-line unified diff of ``path`` at 1-based ``line`` with up to 3 lines of context (``before`` and
    ``after`` as the files hold them: trailing empty lines dropped)."""
    before, after = _trimmed(before), _trimmed(after)
    lo, hi = max(1, line - 3), min(len(before), line + 3)
    head = before[lo - 1:line - 1]
    tail = before[line:hi]
    body = [f" {x}" for x in head] + [f"-{before[line - 1]}", f"+{after[line - 1]}"] + [f" {x}" for x in tail]
    count = hi - lo + 1
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -{lo},{count} +{lo},{count} @@\n"
            + "\n".join(body) + "\n")


def _trimmed(lines: list[str]) -> list[str]:
    lines = list(lines)
    while lines and not lines[-1]:
        lines.pop()
    return lines


class FamilySpec(TypedDict):
    """One generated task before it is written: its files (lines by repo path), the reference patch, the
    package, the module the bug is in (a template's name for ``symptom``), the failing and passing tests, the
    statement and bug class; ``identity`` what its id hashes when not the patch alone, ``extra`` more task.json
    keys."""

    files: dict[str, list[str]]
    patch: str
    package: str
    module: str
    failing: list[str]
    passing: list[str]
    statement: str
    bug_class: str
    difficulty: NotRequired[str]
    identity: NotRequired[str]
    extra: NotRequired[dict[str, str]]


def _pick(rng: random.Random) -> tuple[str, str, str, int, int]:
    right = rng.choice(sorted(OPERATORS))
    wrong = rng.choice([op for op in sorted(OPERATORS) if op != right])
    a, b = rng.randint(3, 9), rng.randint(2, 7)
    while OPERATORS[right](a, b) == OPERATORS[wrong](a, b):
        b += 1
    return right, wrong, rng.choice(VERBS[right]), a, b


def _ladder0(rng: random.Random, index: int) -> FamilySpec:
    right, wrong, verb, a, b = _pick(rng)
    package = f"{rng.choice(NOUNS)}{index}"
    good = [f"def {verb}(a, b):", f'    """The {verb.replace("_", " ")} of a and b."""', f"    return a {right} b", ""]
    bad = list(good)
    bad[2] = f"    return a {wrong} b"
    tests = [f"from {package}.core import {verb}", "", "",
             f"def test_{verb}_of_two_numbers():", f"    assert {verb}({a}, {b}) == {OPERATORS[right](a, b)}", "", "",
             f"def test_{verb}_with_zero():", f"    assert {verb}(0, 0) == 0", ""]
    return {"files": {f"{package}/__init__.py": [""], f"{package}/core.py": bad, "tests/test_core.py": tests},
            "patch": _diff(f"{package}/core.py", bad, good, 3), "package": package, "module": f"{package}/core.py",
            "failing": [f"tests/test_core.py::test_{verb}_of_two_numbers"],
            "passing": [f"tests/test_core.py::test_{verb}_with_zero"],
            "statement": f"`{verb}({a}, {b})` in `{package}/core.py` returns {OPERATORS[wrong](a, b)}, but it should "
                         f"return {OPERATORS[right](a, b)}. The test `test_{verb}_of_two_numbers` fails.",
            "bug_class": "wrong_operator"}


def _ladder1(rng: random.Random, index: int) -> FamilySpec:
    right, wrong, verb, a, b = _pick(rng)
    package = f"{rng.choice(NOUNS)}{index}"
    padding = rng.randint(0, 3)
    helpers: list[str] = []
    for k in range(padding):
        helpers += [f"def unused_{k}(x):", f"    return x + {k}", "", ""]
    good_helpers = helpers + ["def apply(a, b):", f"    return a {right} b", ""]
    bad_helpers = list(good_helpers)
    line = len(helpers) + 2
    bad_helpers[line - 1] = f"    return a {wrong} b"
    api = [f"from {package}.ops import apply", "", "", f"def {verb}(a, b):",
           f'    """The {verb.replace("_", " ")} of a and b."""', "    return apply(a, b)", ""]
    tests = [f"from {package}.api import {verb}", "", "",
             f"def test_{verb}_of_two_numbers():", f"    assert {verb}({a}, {b}) == {OPERATORS[right](a, b)}", "", "",
             f"def test_{verb}_with_zero():", f"    assert {verb}(0, 0) == 0", ""]
    return {"files": {f"{package}/__init__.py": [""], f"{package}/api.py": api, f"{package}/ops.py": bad_helpers,
                      "tests/test_api.py": tests},
            "patch": _diff(f"{package}/ops.py", bad_helpers, good_helpers, line), "package": package,
            "module": f"{package}/ops.py",
            "failing": [f"tests/test_api.py::test_{verb}_of_two_numbers"],
            "passing": [f"tests/test_api.py::test_{verb}_with_zero"],
            "statement": f"`{verb}({a}, {b})` from `{package}/api.py` returns {OPERATORS[wrong](a, b)}, but it "
                         f"should return {OPERATORS[right](a, b)}.",
            "bug_class": "wrong_operator"}


def _symptom(rng: random.Random, index: int) -> FamilySpec:
    template, key = SITES[index % len(SITES)]
    package = f"{rng.choice(NOUNS)}{index}"
    project = TEMPLATES[template](rng, package)
    site = project.sites[key]
    good = project.modules[site.path].split("\n")
    if good.count(site.good) != 1:  # a template whose site line is not unique would patch the wrong line
        raise FamilyError(f"symptom template {template!r}: site {key!r} matches {good.count(site.good)} lines of "
                          f"{site.path}")
    line = good.index(site.good) + 1
    bad = list(good)
    bad[line - 1] = site.bad
    path = f"{package}/{site.path}"
    files = {f"{package}/__init__.py": [""], project.test_file: project.tests.split("\n"),
             **{f"{package}/{name}": text.split("\n") for name, text in project.modules.items()}}
    files[path] = bad
    test_names = [line.split("(")[0].removeprefix("def ") for line in project.tests.split("\n")
                  if line.startswith("def test_")]
    failing = [f"{project.test_file}::{name}" for name in site.failing]
    tests = (f"The failing test is `{failing[0]}`" if len(failing) == 1
             else "The failing tests are " + " and ".join(f"`{node}`" for node in failing))
    return {"files": files, "patch": _diff(path, bad, good, line), "package": package, "module": template,
            "failing": failing,
            "passing": [f"{project.test_file}::{name}" for name in test_names if name not in site.failing],
            "statement": f"{site.statement} {tests}.", "bug_class": site.kind, "difficulty": "medium",
            "identity": _diff(path, bad, good, line) + project.tests,
            "extra": {"source_module": template, "mutated_file": path, "mutated_function": site.function}}


FAMILIES: dict[str, Callable[[random.Random, int], FamilySpec]] = {
    "ladder0": _ladder0, "ladder1": _ladder1, "symptom": _symptom}


def write_family(name: str, count: int, out: Path, seed: int = 0) -> list[Path]:
    """Write ``count`` tasks of family ``name`` under ``out`` (one folder each); returns their folders.

    A folder that already holds the same task is kept; ``out`` may hold other tasks too.
    """
    if name not in FAMILIES:
        raise FamilyError(f"no task family {name!r}; choose one of {sorted(FAMILIES)}")
    if count < 1:
        raise FamilyError(f"--count must be at least 1, got {count}")
    rng = random.Random(f"{name}:{seed}")
    folders = []
    for index in range(count):
        spec = FAMILIES[name](rng, index)
        # ladder ids hash the patch alone (kept: earlier runs' splits deal by id); a symptom task's patch may
        # not show the constants that tell two seeds' variants apart, so its id hashes the tests (which hold them) too
        digest = hashlib.sha256(spec.get("identity", spec["patch"]).encode()).hexdigest()[:8]
        instance_id = f"{name}__{spec['package']}-{digest}"
        folder = out / instance_id
        staging = out / f".{instance_id}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        for rel, lines in spec["files"].items():
            path = staging / "repo" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(_trimmed(lines)) + "\n" if any(lines) else "")
        (staging / "repo" / "pyproject.toml").write_text(f'[project]\nname = "{spec["package"]}"\nversion = "0"\n')
        write_task(staging, {
            "instance_id": instance_id, "problem_statement": spec["statement"], "FAIL_TO_PASS": spec["failing"],
            "PASS_TO_PASS": spec["passing"], "patch": spec["patch"], "test_command": "python -m pytest",
            "source": f"family:{name}/{spec['module']}", "bug_class": spec["bug_class"],
            "difficulty": spec.get("difficulty", "easy"), "test_timeout_s": 10, **spec.get("extra", {})})
        task = load_task(staging)
        write_task(staging, {**task_json(staging), "demands": demands(task).to_dict()})
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
        folders.append(folder)
    return folders


def task_json(folder: Path) -> dict[str, JSONValue]:
    return json.loads((folder / "task.json").read_text())
