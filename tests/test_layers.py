"""Imports point down only: every ``pdbgym`` import in the package, read from the source with ``ast``,
must be allowed by the layer table of docs/architecture.md.

Lazy imports inside functions and ``TYPE_CHECKING`` imports count too: an upward import anywhere
is a dependency that a refactor has to untangle later.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pdbgym"

# Each layer and the layers it may import (besides itself). Top-level modules (errors, fileio, paths,
# termination, httpjson, nucleus, policyname, defaults, progress, ...) are "base".
BELOW_ENV = {"tasks", "grading", "debugger", "sandbox", "base"}
BELOW_AGENT = {"env", "rollouts", "engine"} | BELOW_ENV
ALLOWED: dict[str, set[str]] = {
    "base": set(),
    "sandbox": {"base"},
    "debugger": {"sandbox", "base"},
    "grading": {"sandbox", "base"},
    "tasks": {"grading", "debugger", "sandbox", "base"},
    "env": set(BELOW_ENV),
    "rollouts": {"base"},
    "adapters": {"base"},
    "engine": {"base"},
    "divergence": {"rollouts", "engine", "base"},
    "agent": set(BELOW_AGENT),
    "evaluate": {"agent", "divergence"} | BELOW_AGENT,
    "train": {"evaluate", "agent", "divergence", "adapters"} | BELOW_AGENT,
}
# Folders of task data (buggy projects shipped as tasks), not pdbgym code.
DATA = ("tasks/builtin/", "tasks/regression/")


def layer_of(module: str) -> str | None:
    """``pdbgym.env.tools`` -> ``env``; a top-level module -> ``base``; ``pdbgym.cli`` -> ``cli``."""
    parts = module.split(".")
    if parts[0] != "pdbgym":
        return None
    if len(parts) == 1:
        return "base"
    if (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return "cli" if parts[1] == "cli" else "base"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            # ``from pdbgym import fileio`` names a module: its layer is the name's, not the package's.
            found += [(node.lineno, f"{module}.{alias.name}" if module == "pdbgym" else module) for alias in node.names]
    return found


def source_files() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if not str(p.relative_to(PACKAGE)).startswith(DATA)]


def violations() -> list[tuple[str, str, str]]:
    """(importer layer, imported layer, "file:line module") for every import the table forbids."""
    found = []
    for path in source_files():
        mine = layer_of(module_name(path))
        if mine == "cli":
            continue  # the command line may import everything
        for line, module in imported_modules(path):
            theirs = layer_of(module)
            if theirs is None or theirs == mine or theirs in ALLOWED[mine]:
                continue
            found.append((mine, theirs, f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"))
    return found


def test_every_package_is_in_the_table():
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert packages <= set(ALLOWED), f"add {sorted(packages - set(ALLOWED))} to the layer table"


def test_imports_point_down_only():
    listing = "\n".join(f"{a} -> {b}: {where}" for a, b, where in violations())
    assert not listing, f"imports against the layer table (docs/architecture.md):\n{listing}"


@pytest.mark.parametrize("source,importer,imported", [
    ("from pdbgym.agent.loop import run_episode\n", "pdbgym/env/x.py", "agent"),
    ("from ..agent import loop\n", "pdbgym/env/x.py", "agent"),
    ("from pdbgym import cli\n", "pdbgym/tasks/x.py", "cli"),
    ("def f():\n    from pdbgym.evaluate.stats import wilson\n", "pdbgym/rollouts/x.py", "evaluate"),
])
def test_the_checker_sees_upward_imports_in_every_spelling(tmp_path, monkeypatch, source, importer, imported):
    fake = tmp_path / "pdbgym"
    for name in ("env", "agent", "tasks", "rollouts", "evaluate"):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text("")
    (fake / importer.removeprefix("pdbgym/")).write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert [b for _, b, _ in violations()] == [imported]
