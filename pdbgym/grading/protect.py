"""Which files of a task's repo grading never takes from an agent, and why.

An agent controls every file it can write; grading takes only its changes to ordinary source files.
Never taken: tests and test configuration (``is_protected_path``), files Python or pytest load by
themselves (``sitecustomize.py``, ``usercustomize.py``, ``*.pth``, ``conftest.py`` anywhere), compiled
bytecode, and modules whose top-level import name would shadow the standard library, pytest, pluggy or
pdbgym when their folder is on ``sys.path`` (``json.py``, ``pytest.py``, ``_pytest/``...).
``ignore_reason`` says why a path is not taken, or None when it is.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Collection
from pathlib import PurePosixPath

_TEST_DIR_NAMES = {"tests", "test", "testing"}
_TEST_CONFIG_FILES = {"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg",
                      "pyproject.toml", "noxfile.py"}
_STARTUP_FILES = {"sitecustomize.py", "usercustomize.py"}
# Import names the grading run relies on, besides the standard library.
_RUNNER_MODULES = {"pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging", "pytest_timeout", "pdbgym"}
SHADOW_NAMES: frozenset[str] = frozenset(set(sys.stdlib_module_names) | _RUNNER_MODULES | {"__future__"})
_MODULE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyw", ".so", ".pyd")


def is_protected_path(rel_path: str) -> bool:
    """True for files whose agent edits grading ignores: tests, conftest and test configuration."""
    path = PurePosixPath(rel_path)
    name = path.name
    if name in _TEST_CONFIG_FILES:
        return True
    if name.startswith("test_") or name.endswith("_test.py"):
        return True
    return any(part in _TEST_DIR_NAMES for part in path.parts[:-1])


def import_name(entry: str) -> str:
    """The top-level import name a file or folder called ``entry`` provides (``json.py`` -> ``json``,
    ``_json.cpython-311-x86_64-linux-gnu.so`` -> ``_json``, ``pkg`` -> ``pkg``)."""
    for suffix in _MODULE_SUFFIXES:
        if entry.endswith(suffix):
            return entry[: -len(suffix)].split(".", 1)[0]
    return entry


def source_name_problem(rel_path: str) -> str | None:
    """Why grading never takes a file at ``rel_path`` whatever it holds, or None: a name with a control
    or other unprintable character, a ``:`` or a backslash (the path lists grading hands on are made of
    such separators), or a hidden file or folder (a name starting with ``.``)."""
    for part in rel_path.split("/"):
        if not part.isprintable() or any(c in part for c in ":\\"):
            return (f"the name {part!r} holds a control character, ':' or '\\': never taken; give source "
                    "files plain names")
        if part.startswith("."):
            return "a hidden file or folder (its name starts with '.'): grading takes source files only"
    return None


def ignore_reason(rel_path: str, is_package: Callable[[str], bool]) -> str | None:
    """Why grading does not take the agent's version of ``rel_path`` (repo-relative, '/'-separated), or None.

    ``is_package(folder)`` says whether a repo-relative folder holds an ``__init__.py``; a folder that
    does not may be put on ``sys.path`` (pytest's rootdir insertion, an ini ``pythonpath``), so names
    directly inside it are checked for shadowing like names at the repo root.
    """
    path = PurePosixPath(rel_path)
    name = path.name
    problem = source_name_problem(rel_path)
    if problem is not None:
        return problem
    if is_protected_path(rel_path):
        return "test file or test configuration: grading uses the task's original"
    if name in _STARTUP_FILES:
        return f"{name} runs at interpreter start-up: never taken"
    if name.endswith(".pth"):
        return ".pth files run at interpreter start-up: never taken"
    if name.endswith((".pyc", ".pyo")) or "__pycache__" in path.parts:
        return "compiled bytecode: grading runs from source"
    parts = path.parts
    for depth, part in enumerate(parts):
        folder = "/".join(parts[:depth])
        if (depth == 0 or not is_package(folder)) and import_name(part) in SHADOW_NAMES:
            where = "the repo root" if depth == 0 else f"'{folder}' (not a package, so it can be on sys.path)"
            return (f"'{part}' at {where} would shadow the module '{import_name(part)}' that Python or the "
                    "test runner imports: never taken")
    return None


def new_module_reason(rel_path: str, pristine: Collection[str]) -> str | None:
    """Why an agent's file that the task's repo does not hold (``pristine``: its repo-relative entries)
    is not taken because it adds a module or package where it can be imported at the top level: at the
    repo root, or in a folder of the original that is not a package (``src/``, a test folder, anything
    pytest or an ini ``pythonpath`` may put on ``sys.path``). Such a module can stand in for a test
    module (pytest imports ``tests/test_x.py`` as ``test_x`` when ``tests/`` holds no ``__init__.py``)
    or for anything imported by name. New modules inside the project's packages are taken."""
    path = PurePosixPath(rel_path)
    if rel_path in pristine or not path.name.endswith(_MODULE_SUFFIXES):
        return None
    parts = path.parts
    for depth, part in enumerate(parts):
        folder = "/".join(parts[:depth])
        entry = "/".join(parts[: depth + 1])
        if depth and f"{folder}/__init__.py" in pristine:
            return None  # inside a package of the original: importable only under its name
        if entry not in pristine:
            where = "the repo root" if depth == 0 else f"'{folder}' (not a package, so it can be on sys.path)"
            return (f"'{part}' is a new top-level module or package at {where}: it could be imported in "
                    "place of a test module or of anything imported by that name; never taken")
    return None


_NOT_PROJECT_DIRS = ("__pycache__", ".sandbox_home", ".git")


def protected_digests(root: str, limit_bytes: int = 64 * 1024**2) -> dict[str, str]:
    """sha256 of every test file and test configuration under ``root`` (repo-relative keys), read before
    any project code runs; a tree holding more than ``limit_bytes`` of them is hashed up to that."""
    digests: dict[str, str] = {}
    budget = limit_bytes
    for folder, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _NOT_PROJECT_DIRS)
        for name in sorted(filenames):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if not is_protected_path(rel) or os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as handle:
                data = handle.read(budget + 1)
            if len(data) > budget:
                return digests
            budget -= len(data)
            digests[rel] = hashlib.sha256(data).hexdigest()
    return digests
