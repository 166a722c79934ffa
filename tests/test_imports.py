"""Import discipline, from the parsed source: no circle between pdbgym modules (imports inside functions
and type-only imports under ``if TYPE_CHECKING`` count), and an import inside a function only where it must be lazy, with a comment saying why.

An import may wait for its function when it loads an optional dependency (an extra of pyproject.toml:
torch, TRL, Ray, ...) or scipy (about a second to import), directly or through a pdbgym module that
imports one at load; when it is a command's implementation loaded by a ``commands.py`` module or the
CLI (so ``pdbgym --help`` and every other command start without it); or inside the modules that run in
the sandbox, whose imports are placed by what the guard must see first.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

from pdbgym.sandbox.runtime import runtime_files

PACKAGE = Path(__file__).resolve().parents[1] / "pdbgym"
TASK_DATA = ("tasks/builtin/", "tasks/regression/")
HEAVY_CORE = {"scipy"}  # a required dependency, but about a second to import


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if any(part in rel.as_posix() for part in TASK_DATA):
            continue
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _optional_dependencies() -> set[str]:
    """Top-level import names of the packages pyproject.toml's extras add (pdbgym's own extras aside)."""
    meta = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    names = set()
    for requirements in meta["project"]["optional-dependencies"].values():
        for requirement in requirements:
            name = requirement.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
            if name not in ("pdbgym", "pytest", "ruff", "pytest-xdist", "pytest-timeout"):
                names.add(name.replace("-", "_"))
    return names | {"datasets", "httpx", "httpx2"}  # datasets comes with trl, httpx (httpx2) with openai


LAZY_OK = _optional_dependencies() | HEAVY_CORE


def _targets(module: str, node: ast.Import | ast.ImportFrom, modules: dict[str, Path] = MODULES) -> list[str]:
    """The modules an import statement loads (a pdbgym submodule named in a from-import counts)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        here = module.split(".") if modules[module].name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def _imports(module: str) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(import statement, inside a function) for every import but those under ``if TYPE_CHECKING``."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, in_function))
            visit(child, inner)

    visit(ast.parse(MODULES[module].read_text()), False)
    return found


def _with_packages(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts) + 1) if ".".join(parts[:i]) in MODULES]


@functools.cache
def _loads(module: str) -> frozenset[str]:
    """Third-party top-level names ``module`` imports at load, through pdbgym modules too."""
    seen, todo, third = {module}, [module], set()
    while todo:
        current = todo.pop()
        for node, in_function in _imports(current):
            if in_function:
                continue
            for target in _targets(current, node):
                if target.split(".")[0] != "pdbgym":
                    third.add(target.split(".")[0])
                for name in _with_packages(target) + _with_packages(current)[:-1]:
                    if name not in seen:
                        seen.add(name)
                        todo.append(name)
    return frozenset(third)


def _sandboxed() -> set[str]:
    names = set()
    for rel in runtime_files(PACKAGE):
        parts = list(Path("pdbgym", rel).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.add(".".join(parts))
    return names


def _must_be_lazy(module: str, node: ast.Import | ast.ImportFrom) -> bool:
    for target in _targets(module, node):
        top = target.split(".")[0]
        if top in LAZY_OK:
            return True
        if top == "pdbgym" and target in MODULES and (_loads(target) & LAZY_OK) - _loads(module):
            return True
    return False


def _says_why(lines: list[str], node: ast.stmt) -> bool:
    """A comment on the statement, or on the line above the run of import lines it belongs to."""
    if any("#" in line for line in lines[node.lineno - 1:node.end_lineno]):
        return True
    above = node.lineno - 2
    while above >= 0 and lines[above].strip().startswith(("import ", "from ")):
        above -= 1
    return above >= 0 and lines[above].strip().startswith("#")


def _import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the pdbgym modules it imports anywhere: at the top, inside a function, or under
    ``if TYPE_CHECKING`` (a type-only import still ties the two modules together)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[module] |= {t for t in _targets(module, node, modules) if t in modules and t != module}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                circles.append(sorted(component))

    for vertex in sorted(graph):
        if vertex not in index:
            connect(vertex)
    return circles


def test_no_circle_between_modules_counting_imports_inside_functions_and_type_only_ones():
    circles = _circles(_import_graph(MODULES))
    assert circles == [], "break each circle with a Protocol or a small types module below both modules"


def test_the_circle_check_sees_a_circle_made_only_by_a_type_checking_import(tmp_path):
    package = tmp_path / "pdbgym"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "runner.py").write_text("from pdbgym.executor import run_jobs\n")
    (package / "executor.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                         "    from pdbgym.runner import Job\n")
    (package / "leaf.py").write_text("def f():\n    from . import runner\n")
    modules = {"pdbgym": package / "__init__.py", **{f"pdbgym.{n}": package / f"{n}.py"
                                                     for n in ("runner", "executor", "leaf")}}
    assert _circles(_import_graph(modules)) == [["pdbgym.executor", "pdbgym.runner"]]


def test_imports_inside_functions_are_lazy_only_where_they_must_be_and_say_why():
    sandboxed = _sandboxed()
    needless, silent = [], []
    for module in sorted(MODULES):
        lines = MODULES[module].read_text().splitlines()
        commands = module.endswith(".commands") or module == "pdbgym.cli"
        for node, in_function in _imports(module):
            if not in_function:
                continue
            where = f"{module}:{node.lineno}: {ast.unparse(node)}"
            if not (commands or module in sandboxed or _must_be_lazy(module, node)):
                needless.append(where)
            if not _says_why(lines, node):
                silent.append(where)
    assert needless == [], "import these at the top of the module"
    assert silent == [], "say on the line (or the one above) why the import waits for its function"


def test_the_rule_sees_a_needless_lazy_import_and_a_heavy_one():
    assert not _must_be_lazy("pdbgym.fileio", ast.parse("import json").body[0])
    assert _must_be_lazy("pdbgym.fileio", ast.parse("import torch").body[0])
    assert "torch" in _loads("pdbgym.engine.draw")  # a pdbgym module that pulls torch at load
    assert _must_be_lazy("pdbgym.fileio", ast.parse("from pdbgym.engine.draw import draw_rows").body[0])
