"""Turn a synthesis SOURCE (a local folder or ``pypi:NAME==VERSION``) into a clean, minimal project copy.

A release's sdist is fetched (``fetch.py``) and unpacked (``unpack.py``) without building it: nothing the package ships
runs on the host (``pip download`` would call its build backend for metadata).

The copy holds what the test suite needs and nothing else: the importable packages (a ``src/``
layout is flattened so ``python -m pytest`` from the root imports them), top-level modules, the
folders holding test files (with their data files), root ``conftest.py`` and pytest config files.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from pdbgym.tasks.synth.deps import DependencyError, declared_requirements, pin_requirements
from pdbgym.tasks.synth.fetch import SynthSourceError, fetch_sdist  # the error: re-exported
from pdbgym.tasks.synth.unpack import unpack_sdist

PYPI_PREFIX = "pypi:"
_PYPI_SPEC = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*$")
_IGNORED_DIRS = {".git", ".tox", ".nox", ".venv", "venv", "build", "dist", "docs", "doc", "__pycache__",
                 ".eggs", "node_modules", "examples", "benchmarks", "bench"}
_NOT_MODULES = {"setup.py", "conftest.py", "noxfile.py", "fabfile.py", "tasks.py", "versioneer.py"}
CONFIG_FILES = ("pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml")


def is_test_file(relpath: str) -> bool:
    """True for pytest's default test module names (``test_*.py``, ``*_test.py``)."""
    name = Path(relpath).name
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


@dataclass(frozen=True)
class Project:
    """A prepared project copy: ``root`` holds it; paths below are relative to ``root``."""

    label: str          # what task.json records as ``source``, e.g. "pypi:toolz==1.2.0" or "myproj"
    slug: str           # filesystem/id-safe form of the label, e.g. "toolz-1.2.0"
    root: Path
    source_files: list[str]   # files whose functions may be mutated
    test_files: list[str]
    # A release's declared runtime and test dependencies pinned (``deps.py``): its tasks' environment.
    requirements: tuple[str, ...] = ()


def slug_for(label: str) -> str:
    text = label.removeprefix(PYPI_PREFIX).replace("==", "-")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "project"


def download_sdist(spec: str, dest: Path, timeout_s: float = 300.0) -> Path:
    """Fetch (unless ``dest/download`` already holds it) and unpack the sdist of ``NAME==VERSION``; returns
    the unpacked project folder. The archive is read from the index, never built (``fetch.py``)."""
    if not _PYPI_SPEC.match(spec):
        raise SynthSourceError(f"'{PYPI_PREFIX}{spec}': expected {PYPI_PREFIX}NAME==VERSION, e.g. pypi:toolz==1.2.0")
    download_dir = dest / "download"
    download_dir.mkdir(parents=True, exist_ok=True)
    archives = [p for p in download_dir.iterdir()
                if p.name.endswith((".tar.gz", ".zip")) and not p.name.startswith(".") and p.is_file()]
    if not archives:
        name, version = spec.split("==", 1)
        archives = [fetch_sdist(name, version, download_dir, timeout_s=timeout_s)]
    if len(archives) != 1:
        raise SynthSourceError(f"expected one sdist archive for {spec} in {download_dir}, found {len(archives)}")
    unpacked = dest / "unpacked"
    if unpacked.exists():
        shutil.rmtree(unpacked)
    return unpack_sdist(archives[0], unpacked)


def _walk_py(root: Path) -> list[str]:
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part in _IGNORED_DIRS or part.startswith(".") or part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue
        found.append(rel.as_posix())
    return found


def _package_roots(origin: Path) -> tuple[Path, list[Path], list[Path]]:
    """(import root, top-level package folders, top-level modules) of a project."""
    import_root = origin / "src" if (origin / "src").is_dir() else origin
    packages = sorted(p for p in import_root.iterdir() if p.is_dir() and (p / "__init__.py").is_file()
                      and p.name not in _IGNORED_DIRS and p.name not in ("tests", "test", "testing"))
    modules = sorted(p for p in import_root.glob("*.py") if p.name not in _NOT_MODULES and not is_test_file(p.name))
    return import_root, packages, modules


def prepare_project(source: str, workdir: Path) -> Project:
    """Resolve ``source`` and build the minimal project copy under ``workdir/project``."""
    requirements: tuple[str, ...] = ()
    if source.startswith(PYPI_PREFIX):
        origin = download_sdist(source.removeprefix(PYPI_PREFIX), workdir)
        label = source
        name = source.removeprefix(PYPI_PREFIX).split("==", 1)[0]
        try:
            requirements = tuple(pin_requirements(declared_requirements(origin, name), name))
        except DependencyError as exc:
            raise SynthSourceError(f"{label}: its dependencies cannot be installed here: {exc}") from exc
    else:
        origin = Path(source).expanduser()
        if not origin.is_dir():
            raise SynthSourceError(f"'{source}': no such folder (give a project folder or pypi:NAME==VERSION)")
        origin = origin.resolve()
        label = origin.name
    import_root, packages, modules = _package_roots(origin)
    if not packages and not modules:
        raise SynthSourceError(f"{label}: no importable package or module found at its root or under src/")
    project_root = workdir / "project"
    if project_root.exists():
        shutil.rmtree(project_root)
    project_root.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
    for package in packages:
        shutil.copytree(package, project_root / package.name, ignore=ignore)
    for module in modules:
        shutil.copy2(module, project_root / module.name)
    origin_tests = [rel for rel in _walk_py(origin) if is_test_file(rel) and not rel.startswith("src/")]
    for test_dir in sorted({Path(rel).parent for rel in origin_tests}):
        target = project_root / test_dir
        if test_dir == Path("."):
            continue
        if not target.exists():
            shutil.copytree(origin / test_dir, target, ignore=ignore)
    for rel in origin_tests:
        if Path(rel).parent == Path("."):
            shutil.copy2(origin / rel, project_root / rel)
    for name in (*CONFIG_FILES, "conftest.py"):
        if (origin / name).is_file():
            shutil.copy2(origin / name, project_root / name)
    _anchor_rootdir(project_root)
    all_py = _walk_py(project_root)
    test_files = [rel for rel in all_py if is_test_file(rel)]
    if not test_files:
        raise SynthSourceError(f"{label}: no test files (test_*.py or *_test.py) found; synthesis needs a test suite")
    test_dirs = {Path(rel).parent for rel in test_files if Path(rel).parent != Path(".")}
    source_files = [rel for rel in all_py if not is_test_file(rel) and Path(rel).name != "conftest.py"
                    and not any(Path(rel).is_relative_to(d) for d in test_dirs)]
    return Project(label=label, slug=slug_for(label), root=project_root, source_files=source_files,
                   test_files=test_files, requirements=requirements)


def _anchor_rootdir(project_root: Path) -> None:
    """Make pytest's rootdir the project root, whatever folder the task later sits in.

    Without a pytest config file in the root, pytest walks up the parents and may adopt an unrelated
    config as rootdir, which changes every node id.
    """
    markers = {"pytest.ini": "", "tox.ini": "[pytest]", "setup.cfg": "[tool:pytest]",
               "pyproject.toml": "[tool.pytest.ini_options]"}
    for name, marker in markers.items():
        path = project_root / name
        if path.is_file() and marker in path.read_text(errors="replace"):
            return
    (project_root / "pytest.ini").write_text("[pytest]\n")
