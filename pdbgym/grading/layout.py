"""Where a project's importable code lives, read from its own packaging files, so the code under test is the
repo's and never a released copy installed beside it.

A flat project imports from its root; a *src layout* (or any ``package-dir``) from a folder inside it,
which plain pytest finds only once the project is installed. ``import_roots`` reads, in order:
``[tool.setuptools.package-dir]`` / ``[tool.setuptools.packages.find] where`` of ``pyproject.toml``,
hatch's ``[tool.hatch.build.targets.wheel] packages``, poetry's ``packages = [{from = ...}]``,
``[options] package_dir`` of ``setup.cfg``, a literal ``package_dir={"": "src"}`` in ``setup.py`` (read as
text, never run), and last a ``src/`` folder holding a package. Only folders inside the root are kept (no
absolute path, no ``..``, no link). The graded run, the agent's ``run_tests`` and the pdb session put these
folders ahead of the task's environment on ``sys.path`` (after the standard library).

Standard library only: this runs inside the sandbox too.
"""

from __future__ import annotations

import configparser
import os
import re
import sysconfig
import tomllib

_SETUP_PY_DIR = re.compile(r"""package_dir\s*=\s*\{\s*(['"])\1\s*:\s*(['"])([^'"]+)\2""")
MAX_CONFIG_BYTES = 1024 * 1024


def _read(root: str, name: str) -> str | None:
    path = os.path.join(root, name)
    if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > MAX_CONFIG_BYTES:
        return None
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def _from_pyproject(text: str) -> list[str]:
    try:
        tool = tomllib.loads(text).get("tool", {})
    except tomllib.TOMLDecodeError:
        return []
    found: list[str] = []
    setuptools = tool.get("setuptools", {}) if isinstance(tool, dict) else {}
    package_dir = setuptools.get("package-dir", {}) if isinstance(setuptools, dict) else {}
    if isinstance(package_dir, dict) and isinstance(package_dir.get(""), str):
        found.append(package_dir[""])
    packages = setuptools.get("packages", {}) if isinstance(setuptools, dict) else {}
    where = packages.get("find", {}).get("where") if isinstance(packages, dict) and isinstance(
        packages.get("find"), dict) else None
    if isinstance(where, list):
        found += [w for w in where if isinstance(w, str)]
    wheel = tool.get("hatch", {}).get("build", {}).get("targets", {}).get("wheel", {}) if isinstance(
        tool.get("hatch"), dict) else {}
    for package in wheel.get("packages", []) if isinstance(wheel, dict) else []:
        if isinstance(package, str) and "/" in package.strip("/"):
            found.append(package.strip("/").rsplit("/", 1)[0])
    poetry = tool.get("poetry", {}) if isinstance(tool.get("poetry"), dict) else {}
    for package in poetry.get("packages", []) if isinstance(poetry.get("packages"), list) else []:
        if isinstance(package, dict) and isinstance(package.get("from"), str):
            found.append(package["from"])
    return found


def _from_setup_cfg(text: str) -> list[str]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
        value = parser.get("options", "package_dir", fallback="")
    except configparser.Error:
        return []
    found = []
    for line in value.replace(";", "\n").splitlines():
        key, sep, folder = line.partition("=")
        if sep and not key.strip() and folder.strip():
            found.append(folder.strip())
    return found


def _inside(root: str, folder: str) -> str | None:
    """``root/folder`` when it is a real folder inside ``root`` reached without a link, else None."""
    parts = [p for p in folder.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or folder.startswith("/") or ".." in parts:
        return None
    path = root
    for part in parts:
        path = os.path.join(path, part)
        if os.path.islink(path) or not os.path.isdir(path):
            return None
    return path


def _holds_package(folder: str) -> bool:
    try:
        return any(os.path.isfile(os.path.join(folder, name, "__init__.py")) for name in os.listdir(folder))
    except OSError:
        return False


def import_roots(root: str) -> list[str]:
    """The folders of ``root`` that its code is imported from, ``root`` itself first (absolute paths)."""
    root = os.path.abspath(root)
    declared: list[str] = []
    for name, read in (("pyproject.toml", _from_pyproject), ("setup.cfg", _from_setup_cfg)):
        text = _read(root, name)
        if text is not None:
            declared += read(text)
    setup_py = _read(root, "setup.py")
    if setup_py is not None:
        declared += [match.group(3) for match in _SETUP_PY_DIR.finditer(setup_py)]
    if not declared and _holds_package(os.path.join(root, "src")):
        declared.append("src")
    roots = [root]
    for folder in declared:
        path = _inside(root, folder)
        if path is not None and path not in roots:
            roots.append(path)
    return roots


_NOT_CODE = ("tests", "test", "testing", "docs", "doc", "examples", "benchmarks", "conftest.py", "setup.py")


def project_names(roots: list[str]) -> set[str]:
    """Top-level import names the project provides (packages and modules; tests, conftest and packaging
    scripts left out): those of ``roots``, and of each folder directly under the first root that is not a
    package itself (an undeclared ``lib/`` or ``code/``), so a package the layout missed is still known
    as the project's."""
    names: set[str] = set()
    folders = list(roots)
    if roots:
        try:
            folders += [os.path.join(roots[0], entry) for entry in sorted(os.listdir(roots[0]))
                        if entry not in _NOT_CODE and not entry.startswith((".", "_"))
                        and os.path.isdir(os.path.join(roots[0], entry))
                        and not os.path.islink(os.path.join(roots[0], entry))
                        and not os.path.isfile(os.path.join(roots[0], entry, "__init__.py"))]
        except OSError:
            pass
    for folder in folders:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(folder, entry)
            if entry.startswith((".", "_")) or entry in _NOT_CODE:
                continue
            if os.path.isfile(os.path.join(path, "__init__.py")):
                names.add(entry)
            elif entry.endswith(".py") and os.path.isfile(path) and not entry.startswith("test_"):
                names.add(entry[:-3])
    return names


def put_first(roots: list[str], path: list[str]) -> None:
    """Insert ``roots`` into ``path`` (a ``sys.path``) after the standard library's entries and ahead of
    everything else (site-packages, the task's environment), dropping other copies of them."""
    stdlib = {os.path.abspath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib")}
    path[:] = [p for p in path if not p or os.path.abspath(p) not in roots]
    index = 0
    while index < len(path) and path[index] and (
            os.path.abspath(path[index]) in stdlib or path[index].endswith(".zip")
            or os.path.basename(path[index]) == "lib-dynload"):
        index += 1
    path[index:index] = roots


def package_folders(root: str) -> list[str]:
    """``import_roots`` without the root, relative to it ("src"): what a session in a copy of ``root`` puts
    on its path."""
    root = os.path.abspath(root)
    return [os.path.relpath(path, root) for path in import_roots(root)[1:]]
