"""What a released project needs to run its tests: its declared dependencies, pinned.

Read from the unpacked sdist (or a repository's tree): the runtime dependencies and the test extras or
groups (``PKG-INFO``, setuptools' ``*.egg-info/requires.txt``, ``pyproject.toml``'s ``[project]`` and
``[dependency-groups]``, ``setup.cfg``, the literal arguments of ``setup(...)`` in ``setup.py``, parsed and
never run), test requirements files and ``tox.ini``'s ``deps``. Markers are evaluated for this
interpreter; the project itself (an extra naming it, ``attrs[tests]``) is expanded, never installed, so
its tests import the repo's code; tools that run no test (coverage, linters, docs, packaging) are left
out. The set is then resolved to exact pins, together with the test runner's pins, by the installer
(``pip install --dry-run --report``, binary wheels only), so a task records its whole environment and
``tasks validate`` builds the same one from the record alone.
"""

from __future__ import annotations

import ast
import configparser
import json
import re
import subprocess
import sys
import tomllib
from email.parser import HeaderParser
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from pdbgym.errors import PdbgymError
from pdbgym.sandbox import beneath
from pdbgym.sandbox.pyenv import (
    ARCHIVE_SUFFIXES,
    RUNNER_DISTRIBUTIONS,
    runner_distribution_names,
    runner_pins,
)

TEST_EXTRAS = frozenset({"test", "tests", "testing", "dev", "develop", "development"})
# Never needed to run a test here: pdbgym's runner brings pytest; the rest measure, lint, document, package.
NOT_FOR_TESTS = re.compile(
    r"^(pytest|pytest-(sugar|randomly|mypy.*|ruff|black|flake8|isort|checkdocs|enabler|html|pylint)|"
    r"codecov|coveralls|tox|"
    r"nox|pre-commit.*|mypy|"
    r"flake8.*|ruff|black|isort|pylint|pyright|sphinx.*|furo|myst-parser|twine|build|wheel|setuptools-scm|"
    r"check-manifest|towncrier|bump.*|ipython|ipdb|pdbpp|types-.*|.*-stubs|docutils|readme-renderer)$")
REQUIREMENT_FILES = ("requirements-test.txt", "requirements-tests.txt", "requirements_test.txt", "test-requirements.txt",
                     "test_requirements.txt", "requirements-dev.txt", "dev-requirements.txt",
                     "requirements/test.txt", "requirements/tests.txt", "requirements/testing.txt",
                     "tests/requirements.txt", "test/requirements.txt", "requirements.txt")


MAX_FILE_BYTES = 4 * 1024**2  # far above any packaging or requirements file


class DependencyError(PdbgymError):
    """A project's declared dependencies cannot be resolved to binary wheels for this interpreter."""


def _applies(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return True
    base = default_environment()
    return any(requirement.marker.evaluate({**base, "extra": extra}) for extra in ("", *sorted(extras)))


def _requirement(line: str) -> Requirement | None:
    line = line.split(" #", 1)[0].strip()
    if not line or line.startswith(("#", "-", "[")) or "{" in line:
        return None
    try:
        return Requirement(line)
    except InvalidRequirement:
        return None


def _text(origin: Path, rel: str | Path) -> str | None:
    """The text of the regular file ``rel`` inside ``origin``, never through a link (the tree is a release's
    or a mirror's, so hostile: a ``pyproject.toml`` that links to a host file must not be read), or None."""
    try:
        data, _ = beneath.read_bytes(origin, Path(rel).as_posix(), MAX_FILE_BYTES, follow_links=False)
    except OSError:
        return None
    return data.decode("utf-8", errors="replace")


def _metadata_lines(origin: Path) -> list[str]:
    """``Requires-Dist`` of ``PKG-INFO`` (markers with their ``extra``) and ``*.egg-info/requires.txt``."""
    lines: list[str] = []
    for pkg_info in (origin / "PKG-INFO", *origin.glob("*.egg-info/PKG-INFO"), *origin.glob("src/*.egg-info/PKG-INFO")):
        if (text := _text(origin, pkg_info.relative_to(origin))) is not None:
            lines += HeaderParser().parsestr(text).get_all("Requires-Dist") or []
    for requires in (*origin.glob("*.egg-info/requires.txt"), *origin.glob("src/*.egg-info/requires.txt")):
        section = ""
        for raw in (_text(origin, requires.relative_to(origin)) or "").splitlines():
            raw = raw.strip()
            if raw.startswith("[") and raw.endswith("]"):
                section = raw[1:-1]
            elif raw:
                extra, _, marker = section.partition(":")
                conditions = [f"({marker})"] if marker else []
                conditions += [f'extra == "{extra}"'] if extra else []
                lines.append(raw + (f"; {' and '.join(conditions)}" if conditions else ""))
    return lines


def _pyproject_lines(origin: Path) -> list[str]:
    text = _text(origin, "pyproject.toml")
    if text is None:
        return []
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return []
    project = data.get("project", {})
    lines = [str(d) for d in project.get("dependencies", []) if isinstance(d, str)]
    for extra, deps in project.get("optional-dependencies", {}).items():
        lines += [f'{d}; extra == "{extra}"' if ";" not in d else d for d in deps if isinstance(d, str)]
    for group, deps in data.get("dependency-groups", {}).items():
        if canonicalize_name(group) in TEST_EXTRAS:
            lines += [d for d in deps if isinstance(d, str)]  # {include-group = ...} tables are left out
    return lines


def _setup_cfg_lines(origin: Path) -> list[str]:
    text = _text(origin, "setup.cfg")
    if text is None:
        return []
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    lines = parser.get("options", "install_requires", fallback="").splitlines()
    if parser.has_section("options.extras_require"):
        for extra, deps in parser.items("options.extras_require"):
            lines += [f'{d}; extra == "{extra}"' for d in deps.splitlines() if d.strip() and ";" not in d]
    return lines


def _setup_py_lines(origin: Path) -> list[str]:
    """``install_requires``, ``tests_require`` and ``extras_require`` of ``setup(...)`` in ``setup.py``, read
    from its syntax tree as literals (directly, or through a module-level name bound to one), never run:
    older projects declare their dependencies nowhere else."""
    text = _text(origin, "setup.py")
    if text is None:
        return []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    bound: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound[node.targets[0].id] = node.value

    def literal(node: ast.expr) -> object:
        try:
            return ast.literal_eval(bound.get(node.id, node) if isinstance(node, ast.Name) else node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None

    lines: list[str] = []
    for call in ast.walk(tree):
        name = getattr(call.func, "id", getattr(call.func, "attr", "")) if isinstance(call, ast.Call) else ""
        if name != "setup":
            continue
        for keyword in call.keywords:
            value = literal(keyword.value)
            if keyword.arg in ("install_requires", "tests_require") and isinstance(value, (list, tuple)):
                extra = ' ; extra == "test"' if keyword.arg == "tests_require" else ""
                lines += [f"{d}{extra}".replace(" ;", ";") for d in value if isinstance(d, str) and ";" not in d]
            elif keyword.arg == "extras_require" and isinstance(value, dict):
                for extra, deps in value.items():
                    deps = [deps] if isinstance(deps, str) else deps
                    if isinstance(extra, str) and ":" not in extra and isinstance(deps, (list, tuple)):
                        lines += [f'{d}; extra == "{extra}"' for d in deps if isinstance(d, str) and ";" not in d]
    return lines


def _file_lines(origin: Path) -> list[str]:
    """Test requirements files and tox's ``deps``; ``-r`` followed only to files inside the sdist."""
    lines: list[str] = []
    seen: set[Path] = set()

    def read(path: Path) -> None:
        path = path.resolve()
        if path in seen or not path.is_file() or not path.is_relative_to(origin.resolve()):
            return
        seen.add(path)
        for raw in path.read_text(errors="replace").splitlines():
            raw = raw.strip()
            if raw.startswith(("-r ", "--requirement ")):
                read(path.parent / raw.split(None, 1)[1].strip())
            else:
                lines.append(raw)

    for name in REQUIREMENT_FILES:
        read(origin / name)
    tox = _text(origin, "tox.ini")
    if tox is not None:
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            parser.read_string(tox)
            for raw in parser.get("testenv", "deps", fallback="").splitlines():
                raw = raw.strip()
                if raw.startswith("-r"):
                    read(origin / raw[2:].strip())
                else:
                    lines.append(raw)
        except configparser.Error:
            pass
    return lines


def _excludes_runner_pytest(requirement: Requirement) -> bool:
    """Whether the project's pytest requirement rules out the pytest pdbgym's runner would bring."""
    ours = next((pin.partition("==")[2] for pin in runner_pins() if pin.startswith("pytest==")), None)
    return bool(requirement.specifier) and ours is not None and not requirement.specifier.contains(ours, prereleases=True)


def project_name(origin: Path) -> str | None:
    """The distribution name a project's own files give (``[project] name``, ``setup.cfg``'s ``[metadata]
    name``, a literal ``name=`` in ``setup.py``, read as text), or None."""
    try:
        name = tomllib.loads(_text(origin, "pyproject.toml") or "").get("project", {}).get("name")
        if isinstance(name, str) and name:
            return name
    except (tomllib.TOMLDecodeError, AttributeError):
        pass
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(_text(origin, "setup.cfg") or "")
        if parser.get("metadata", "name", fallback=""):
            return parser.get("metadata", "name")
    except configparser.Error:
        pass
    found = re.search(r"""\bname\s*=\s*['"]([A-Za-z0-9._-]+)['"]""", _text(origin, "setup.py") or "")
    return found.group(1) if found else None


def declared_requirements(origin: Path, project_name: str) -> list[str]:
    """What the project at ``origin`` declares for running and testing, as declared (ranges kept)."""
    own = canonicalize_name(project_name)
    raw = [*_metadata_lines(origin), *_pyproject_lines(origin), *_setup_cfg_lines(origin), *_setup_py_lines(origin),
           *_file_lines(origin)]
    parsed = [r for line in raw if (r := _requirement(line)) is not None and r.url is None]
    extras = set(TEST_EXTRAS)
    changed = True
    while changed:  # an extra naming the project itself (dev = ["attrs[tests]"]) adds those extras
        changed = False
        for requirement in parsed:
            if canonicalize_name(requirement.name) == own and _applies(requirement, frozenset(extras)):
                new = {canonicalize_name(e) for e in requirement.extras} - extras
                extras |= new
                changed = changed or bool(new)
    runner = runner_distribution_names()  # pytest's own dependencies: the runner's versions decide
    chosen: dict[str, str] = {}
    for requirement in parsed:
        name = canonicalize_name(requirement.name)
        if name == "pytest" and _excludes_runner_pytest(requirement) and _applies(requirement, frozenset(extras)):
            requirement.marker = None  # a project that needs another pytest (<9) gets it: kept, resolved
            chosen.setdefault(str(requirement), name)
            continue
        if name == own or name in runner or NOT_FOR_TESTS.match(name) or not _applies(requirement, frozenset(extras)):
            continue
        requirement.marker = None
        chosen.setdefault(str(requirement), name)
    return sorted(chosen)


def pin_requirements(declared: list[str], project_name: str, timeout_s: float = 300.0) -> list[str]:
    """``declared`` resolved to ``name==version`` for this interpreter, binary wheels only, beside the
    runner's pins; the runner's own distributions and the project itself left out of the result."""
    if not declared:
        return []
    # The sdist's requirements as arguments after "--": never options, never in a -r file (whose ${VAR} pip
    # expands from the host); none pip would read as an archive in its working folder (`name==1+x.zip`).
    declared = [r for r in declared if not r.lower().endswith(ARCHIVE_SUFFIXES)]
    own = {canonicalize_name(_requirement(r).name) for r in declared if _requirement(r) is not None}
    runner = [pin for pin in runner_pins() if canonicalize_name(pin.partition("==")[0]) not in own]
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", "-",
            "--only-binary", ":all:", "--disable-pip-version-check", "--no-input", "--", *declared, *runner]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise DependencyError(f"resolving {', '.join(declared)} took over {timeout_s:.0f} s") from exc
    if done.returncode != 0:
        message = "\n".join(line for line in (done.stderr or done.stdout).splitlines()
                            if not line.startswith("WARNING:"))
        raise DependencyError(f"pip cannot resolve {', '.join(declared)} to wheels for this Python:\n"
                              f"{message.strip()[-2000:]}")
    try:
        report = json.loads(done.stdout)
        resolved = {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
                    for item in report["install"]}
    except (ValueError, KeyError, TypeError) as exc:
        raise DependencyError(f"pip's resolution report of {', '.join(declared)} could not be read: {exc}") from exc
    skip = {canonicalize_name(project_name), *(set(RUNNER_DISTRIBUTIONS) - own)}  # a pytest it declared stays
    return sorted(f"{name}=={version}" for name, version in resolved.items() if name not in skip)
