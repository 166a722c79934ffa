"""Which test files can observe a module's import-time state: a static, over-approximating import graph.

A function that runs while its module is imported (rules tables built by calling it, a decorator
factory, a class made by a factory) leaves its effect in module-level state. Coverage cannot say which
tests see that state, since no test enters the function. A test file can only reach it by importing the
module, directly or through other modules, so the tests to run for such a mutant are those of the test
files whose import closure holds the module (plus any test that entered the function).

The closure is computed from the source alone and errs toward including:

* every ``import``/``from ... import`` anywhere in a file (function bodies included), relative imports
  resolved against the file's package, ``from a import b`` counting ``a.b`` as a possible submodule;
* a dotted name resolves to every project file whose path ends with it (``tests/helpers.py`` is
  ``helpers`` when pytest puts ``tests/`` on ``sys.path``), and importing ``a.b.c`` imports ``a`` and
  ``a.b`` too;
* the ``conftest.py`` files above a test file, and the modules they name in ``pytest_plugins``;
* a file that imports dynamically (``importlib``, ``__import__``, ``exec``, import hooks) might import
  anything, so a test file whose closure holds one observes every module;
* a file that does not parse observes every module.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import PurePosixPath

# Source text that can import a module by a name computed at run time.
_DYNAMIC = re.compile(r"\bimportlib\b|__import__|\bexec\s*\(|\bmeta_path\b|\bpath_hooks\b|\bfind_spec\b|"
                      r"\bspec_from_|\brunpy\b|\bpkgutil\b")
ALL = "*"  # a closure entry meaning "any module"


def _module_name(relpath: str) -> list[str]:
    parts = list(PurePosixPath(relpath).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return parts


def _imported_names(tree: ast.Module, relpath: str) -> set[str]:
    """Dotted names a file may import (relative ones resolved), each with its parent packages."""
    package = _module_name(relpath)
    if not relpath.endswith("__init__.py"):
        package = package[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)] if node.level - 1 <= len(package) else []
                prefix = ".".join([*base, *([node.module] if node.module else [])])
            else:
                prefix = node.module or ""
            if prefix:
                names.add(prefix)
            names.update(f"{prefix}.{alias.name}" if prefix else alias.name for alias in node.names)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytest_plugins"
                                                  for t in node.targets):
            for constant in ast.walk(node.value):
                if isinstance(constant, ast.Constant) and isinstance(constant.value, str):
                    names.add(constant.value)
    expanded = set()
    for name in names:
        parts = name.split(".")
        expanded.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return expanded


class ImportGraph:
    """The static import graph of a project's Python files (paths relative to the project root)."""

    def __init__(self, files: dict[str, str]) -> None:
        """``files``: relative path -> source text of every Python file of the project."""
        self.files = sorted(files)
        by_suffix: dict[str, list[str]] = {}
        for relpath in self.files:
            parts = _module_name(relpath)
            for start in range(len(parts)):
                by_suffix.setdefault(".".join(parts[start:]), []).append(relpath)
        self.edges: dict[str, set[str]] = {}
        self._closures: dict[str, set[str]] = {}
        for relpath, text in files.items():
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError):
                self.edges[relpath] = {ALL}
                continue
            targets = {found for name in _imported_names(tree, relpath) for found in by_suffix.get(name, [])}
            if _DYNAMIC.search(text):
                targets.add(ALL)
            targets.discard(relpath)
            self.edges[relpath] = targets

    def closure(self, test_file: str) -> set[str]:
        """Every file ``test_file`` may import, itself and its ``conftest.py`` files included; holds
        :data:`ALL` when one of them may import anything."""
        if test_file in self._closures:
            return self._closures[test_file]
        roots = [test_file] + [c for c in self.files if PurePosixPath(c).name == "conftest.py"
                               and PurePosixPath(test_file).is_relative_to(PurePosixPath(c).parent)]
        seen: set[str] = set()
        queue = deque(roots)
        while queue:
            current = queue.popleft()
            if current in seen:
                continue
            seen.add(current)
            if current == ALL:
                continue
            queue.extend(self.edges.get(current, ()))
        self._closures[test_file] = seen
        return seen

    def observers(self, module_file: str, test_files: list[str]) -> list[str]:
        """The test files whose import closure may hold ``module_file``."""
        found = []
        for test_file in test_files:
            closure = self.closure(test_file)
            if module_file in closure or ALL in closure:
                found.append(test_file)
        return found
