"""The pdbgym a sandbox sees: a read-only copy of the modules that run inside it, and no task data.

pdbgym's package folder also holds every built-in and regression task (``task.json`` with the reference
patch, the pristine repo); bound into the sandbox, one pdb ``!`` command could print the answer. So the
bwrap backend never binds that folder: it binds, at the folder's own path (so ``launch.LAUNCHER``
and ``import pdbgym`` through an editable install's finder keep working) and wherever a bound folder
shows it (a site-packages, a prefix, ``/usr``), a copy of the modules started in the sandbox
(``SANDBOX_ENTRY_POINTS``), every pdbgym module they import (read from their source, so a module the
report plugin starts to import comes along by itself) and the ``__init__.py`` of the packages a module
run by name needs. The copy is made once per process, named by its content and kept in the temp folder,
shared by every process of the uid. The plain backend mounts nothing and so hides nothing.
"""

from __future__ import annotations

import ast
import atexit
import functools
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from pdbgym.errors import SandboxError

# Every pdbgym module a sandboxed process starts: (module, started by path). A script started by path
# needs no package around it; a module started with ``-m`` or loaded by name (``-p``, ``__import__``)
# needs its packages' ``__init__.py``.
SANDBOX_ENTRY_POINTS: tuple[tuple[str, bool], ...] = (
    ("pdbgym.grading.launch", True),  # the grading run (grading/testrun.py)
    ("pdbgym.grading.plugin", False),  # its report plugin, and what that imports
    ("pdbgym.debugger.launcher", True),  # the pdb session (debugger/session.py)
    ("pdbgym.grading.server", True),  # the episode's pytest fork server (sandbox/zygote.py)
    ("pdbgym.tasks.synth.zygote", False),  # synthesis: the fork server, python -m
    ("pdbgym.tasks.synth.hotserver", False),  # synthesis: the hot server, python -m
    ("pdbgym.tasks.synth.probe", False),  # synthesis: the outcome probe, -p
)
_MODULE_NAME = re.compile(r"pdbgym(\.[A-Za-z_][A-Za-z0-9_]*)+")


def _module_file(package: Path, module: str) -> Path | None:
    """The source file of ``module`` (``pdbgym.a.b``) in ``package``, or None."""
    parts = module.split(".")[1:]
    if not parts:
        return package / "__init__.py" if (package / "__init__.py").is_file() else None
    for candidate in (package.joinpath(*parts, "__init__.py"), package.joinpath(*parts[:-1], parts[-1] + ".py")):
        if candidate.is_file():
            return candidate
    return None


def _imports(tree: ast.Module, module: str, is_package: bool) -> Iterable[tuple[str, bool]]:
    """(pdbgym module, must exist) for each import in ``tree``, lazy ones too, and each string
    constant naming a pdbgym module (``__import__("pdbgym.x")``, ``-p pdbgym.x``) where one exists."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "pdbgym":
                    yield alias.name, True
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*here[:len(here) - node.level + 1], *([base] if base else [])])
            if base.split(".")[0] != "pdbgym":
                continue
            yield base, True
            for alias in node.names:
                yield f"{base}.{alias.name}", False  # a submodule, or a name defined in ``base``
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_NAME.fullmatch(node.value):
            yield node.value, False


def runtime_files(package: Path) -> dict[str, bytes]:
    """Relative path -> content of every file of ``package`` that runs in a sandbox.

    Raises ``SandboxError`` when an entry point, or a pdbgym module one of them imports, is missing:
    the sandbox would fail in a way far harder to trace."""
    files: dict[str, bytes] = {}
    pending = [(module, by_path, "SANDBOX_ENTRY_POINTS") for module, by_path in SANDBOX_ENTRY_POINTS]
    while pending:
        module, by_path, importer = pending.pop()
        found = _module_file(package, module)
        if found is None:
            raise SandboxError(f"{importer} needs {module}, which is not in {package}: the sandbox's copy "
                               "of pdbgym's runtime modules cannot be made; reinstall pdbgym")
        rel = found.relative_to(package).as_posix()
        if not by_path:  # a module loaded by name loads each package above it first
            parts = module.split(".")
            pending += [(".".join(parts[:i]), False, module) for i in range(1, len(parts))]
        if rel in files:
            continue
        files[rel] = found.read_bytes()
        tree = ast.parse(files[rel], filename=str(found))
        for name, required in _imports(tree, module, found.name == "__init__.py"):
            if required or _module_file(package, name) is not None:
                pending.append((name, False, module))
    return files


@functools.cache
def runtime_copy(package: Path) -> Path:
    """The host folder holding ``runtime_files(package)``: one per uid and content, shared and kept
    (so no process, killed or forked, leaves copies behind); a private folder removed at exit where
    the shared name is taken by someone else."""
    files = runtime_files(package)
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    shared = Path(tempfile.gettempdir()) / f"pdbgym-sandbox-runtime-{os.getuid()}-{digest.hexdigest()[:16]}"
    if _holds(shared, files):
        return shared
    staging = Path(tempfile.mkdtemp(prefix="pdbgym-sandbox-runtime-new-"))
    for rel, data in files.items():
        target = staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o644)
    for folder in [staging, *(p for p in staging.rglob("*") if p.is_dir())]:
        folder.chmod(0o755)
    try:
        os.rename(staging, shared)  # atomic; refused when another process (or user) made it first
    except OSError:
        pass
    if _holds(shared, files):
        shutil.rmtree(staging, ignore_errors=True)
        return shared
    creator = os.getpid()
    atexit.register(lambda: shutil.rmtree(staging, ignore_errors=True) if os.getpid() == creator else None)
    return staging


def _holds(folder: Path, files: dict[str, bytes]) -> bool:
    """Whether ``folder`` is a real folder of ours, writable by nobody else, holding exactly ``files``."""
    try:
        info = folder.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            return False
        present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir()}
        return present == set(files) and all((folder / rel).read_bytes() == data for rel, data in files.items())
    except OSError:
        return False


def runtime_args(package: Path, bound: Iterable[str]) -> list[str]:
    """bwrap binds of the runtime copy over ``package``: at its own path and at every path under one
    of the ``bound`` folders that shows it (a bind hides the folder at that path only, not at another
    path of the same host folder)."""
    copy = runtime_copy(package)
    if not (copy / "__init__.py").is_file():  # removed under us (a /tmp cleaner)
        runtime_copy.cache_clear()
        copy = runtime_copy(package)
    real = package.resolve()
    targets = {str(package), str(real)}
    for root in bound:
        resolved = Path(root).resolve()
        if real.is_relative_to(resolved):
            targets.add(str(Path(root) / real.relative_to(resolved)))
    return [arg for target in sorted(targets) for arg in ("--ro-bind", str(copy), target)]
