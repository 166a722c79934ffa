"""Task environments: the site-packages a sandboxed command sees, instead of pdbgym's own.

A task may declare pinned requirements (``task.json`` ``requirements``). Each distinct set is built once,
with pdbgym's test runner (pytest and pytest-timeout at the versions pdbgym runs) pinned beside it, into
``$PDBGYM_HOME/envs/<key>/site-packages``, where ``key`` hashes the requirements, the runner pins and the
interpreter (``environment_key``). The bwrap sandbox mounts it read-only (``pdbgym.sandbox.bwrap``), so a
task's code imports what its environment holds and nothing of pdbgym's own dependencies.

A task without requirements gets the runner environment: a copy of just the runner's distributions
as installed beside pdbgym (``runner_environment``), made without the network, kept in the temp folder
like the sandbox's copy of pdbgym's runtime modules.

A build runs the installer (``uv`` where it is on PATH, else pip) into a staging folder, binary wheels
only (no requirement's code runs on the host while installing), checks the tree (no links, nothing but
files and folders), makes it read-only, writes ``env.json`` and only then renames the folder to its key:
a folder named by a key is always whole. Builds of one key wait on each other (a lock file).

Requirements reach the installer as arguments after ``--``, never in a ``-r`` file, where pip and uv
expand ``${VAR}`` from the host's environment (its value came back in the error); ``$`` and ``===`` are refused.
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import hashlib
import importlib.metadata as metadata
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from pdbgym.errors import PdbgymError
from pdbgym.paths import pdbgym_home

ENV_MOUNT = "/pdbgym-env"  # where the sandbox sees the task's site-packages
MANIFEST = "env.json"
SITE_DIR = "site-packages"
RUNNER_DISTRIBUTIONS = ("pytest", "pytest-timeout")  # what pdbgym's grading run and pdb session import
PINNED_OPERATORS = ("==",)  # not "===": arbitrary equality pins any string, not a version
# What pip takes a requirement argument ending in for a local archive file (``_get_url_from_path``).
ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tgz", ".tar.gz", ".tbz", ".tar.bz2", ".txz", ".tar.xz", ".tlz",
                    ".tar.lz", ".tar.lzma")
STAGING_STALE_S = 3600.0  # a staging folder older than this is a killed build's, removed by prune


class EnvironmentBuildError(PdbgymError):
    """A task environment could not be built, or its requirements are refused."""


@dataclass(frozen=True)
class EnvironmentInfo:
    """One built environment in the cache: its key, requirements, size on disk and build time."""

    key: str
    path: Path
    requirements: list[str]
    runner: list[str]
    python: str
    installer: str
    build_s: float
    bytes: int
    files: int

    @property
    def site_packages(self) -> Path:
        return self.path / SITE_DIR


# -- requirements ---------------------------------------------------------------------------------------


def requirement_problem(line: object) -> str | None:
    """Why ``line`` cannot be a task requirement, or None. A requirement is ``name[extras]==version``
    with an optional marker: no installer option (``-r``, ``--index-url``), no URL or path (``name @ url``,
    ``./dir``), no range: what a task installs is named exactly and comes from the package index."""
    if not isinstance(line, str):
        return f"a requirement must be a string, got {type(line).__name__}"
    text = line.strip()
    if not text:
        return "an empty requirement"
    if text.startswith("-"):
        return f"{text[:80]!r} is an installer option, not a requirement; name a package as NAME==VERSION"
    if any(ch in text for ch in "\n\r\0\\"):
        return f"{text[:80]!r} holds a line break, NUL or backslash"
    if "$" in text:  # installers expand ${VAR} from the host's environment in requirements files
        return f"{text[:80]!r} holds '$'; environment variables are never expanded here, write NAME==VERSION"
    if "===" in text:
        return f"{text[:80]!r} uses '===' (arbitrary equality); write NAME==VERSION with a real version"
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        return f"{text[:80]!r} is not a requirement ({exc}); write NAME==VERSION"
    if requirement.url is not None:
        return f"{text[:80]!r} names a URL or path; only packages from the index, as NAME==VERSION"
    specs = list(requirement.specifier)
    if len(specs) != 1 or specs[0].operator not in PINNED_OPERATORS or "*" in specs[0].version:
        return f"{text[:80]!r} is not pinned; write {requirement.name}==VERSION"
    if specs[0].version.lower().endswith(ARCHIVE_SUFFIXES):  # pip reads `x==1+a.zip` as a file in its cwd
        return f"{text[:80]!r} looks like an archive's file name; write {requirement.name}==VERSION"
    return None


def check_requirements(requirements: Iterable[object], where: str = "") -> list[str]:
    """The requirements normalized (``name[extras]==version; marker``, sorted, names canonical), or
    ``EnvironmentBuildError`` naming each refused one and ``where`` they came from."""
    problems = [p for line in requirements if (p := requirement_problem(line)) is not None]
    if problems:
        listing = "\n  - ".join(problems)
        raise EnvironmentBuildError(f"{where}refused requirements:\n  - {listing}")
    normalized = []
    for line in requirements:
        requirement = Requirement(str(line).strip())
        requirement.name = canonicalize_name(requirement.name)
        normalized.append(str(requirement))
    unique = sorted(set(normalized))
    unmarked = [canonicalize_name(Requirement(r).name) for r in unique if Requirement(r).marker is None]
    twice = sorted({name for name in unmarked if unmarked.count(name) > 1})
    if twice:
        raise EnvironmentBuildError(f"{where}requirements pin {', '.join(twice)} to more than one version")
    if (problem := runner_problem(unique)) is not None:
        raise EnvironmentBuildError(f"{where}{problem}")
    return unique


# -- the runner: pytest and its dependencies as installed beside pdbgym --------------------------------


def _closure(names: Iterable[str]) -> list[metadata.Distribution]:
    """The installed distributions ``names`` and everything they require here (markers evaluated, no extras)."""
    marker_env = default_environment()
    found: dict[str, metadata.Distribution] = {}
    pending = list(names)
    while pending:
        name = canonicalize_name(pending.pop())
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError as exc:
            raise EnvironmentBuildError(f"pdbgym's test runner needs {name}, which is not installed; "
                                        "reinstall pdbgym (pip install -e .)") from exc
        found[name] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({**marker_env, "extra": ""}):
                pending.append(requirement.name)
    return [found[n] for n in sorted(found)]


@functools.cache
def runner_pins() -> tuple[str, ...]:
    """``pytest==X``, ``pytest-timeout==Y``: the runner every environment holds, at pdbgym's versions."""
    return tuple(f"{canonicalize_name(d.metadata['Name'])}=={d.version}"
                 for d in _closure(RUNNER_DISTRIBUTIONS) if canonicalize_name(d.metadata["Name"]) in RUNNER_DISTRIBUTIONS)


@functools.cache
def runner_distribution_names() -> frozenset[str]:
    """Canonical names of the runner's distributions and everything they require here."""
    return frozenset(canonicalize_name(d.metadata["Name"]) for d in _closure(RUNNER_DISTRIBUTIONS))


def python_tag() -> str:
    """The interpreter an environment is built for: implementation, version and platform."""
    return f"{sys.implementation.name}-{sys.version_info.major}.{sys.version_info.minor}-{sysconfig.get_platform()}"


# The pytest versions pdbgym's runner, report plugin and guards work under (tested on 7.4, 8.3 and 9.x).
SUPPORTED_PYTEST = SpecifierSet(">=7.0,<10")


def runner_pins_for(requirements: Sequence[str]) -> tuple[str, ...]:
    """The runner pins a build adds to ``requirements``: pdbgym's versions of pytest and pytest-timeout,
    except where the task pins one itself (a project whose conftest needs pytest 8: its own pytest runs
    its tests, and no pin of pdbgym's conflicts with it)."""
    own = {canonicalize_name(Requirement(r).name) for r in requirements}
    return tuple(pin for pin in runner_pins() if canonicalize_name(Requirement(pin).name) not in own)


def runner_problem(requirements: Sequence[str]) -> str | None:
    """Why the task's own pin of pytest cannot run pdbgym's runner (outside ``SUPPORTED_PYTEST``), or None."""
    for line in requirements:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) != "pytest":
            continue
        version = next(iter(requirement.specifier)).version
        if Version(version) not in SUPPORTED_PYTEST:
            return (f"{line!r}: pdbgym's test runner works with pytest 7.x to 9.x (>=7.0,<10); pin a "
                    "pytest in that range, or leave pytest out to get pdbgym's own")
    return None


def environment_key(requirements: Sequence[str]) -> str:
    """The cache key of an environment: requirements (normalized), runner pins and interpreter."""
    normalized = check_requirements(requirements)
    spec = {"requirements": normalized, "runner": list(runner_pins_for(normalized)), "python": python_tag()}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]


def _dist_files(dist: metadata.Distribution) -> list[tuple[Path, str]]:
    """(host file, path relative to site-packages) of an installed distribution, never outside it."""
    files = []
    for entry in dist.files or []:
        rel = Path(entry.as_posix())
        if rel.is_absolute() or ".." in rel.parts:
            continue  # console scripts in bin/: not part of site-packages
        files.append((Path(str(dist.locate_file(entry))), rel.as_posix()))
    return files


@functools.cache
def runner_environment() -> Path:
    """A site-packages holding only the runner's distributions, copied from pdbgym's own; one per uid and
    content in the temp folder, shared by every process and kept (as the sandbox's runtime copy)."""
    files = [f for dist in _closure(RUNNER_DISTRIBUTIONS) for f in _dist_files(dist) if f[0].is_file()]
    digest = hashlib.sha256(json.dumps(sorted((rel, src.stat().st_size) for src, rel in files)).encode())
    shared = Path(tempfile.gettempdir()) / f"pdbgym-sandbox-runner-{os.getuid()}-{digest.hexdigest()[:16]}"
    if _whole(shared):
        return shared / SITE_DIR
    staging = Path(tempfile.mkdtemp(prefix="pdbgym-sandbox-runner-new-"))
    for source, rel in files:
        target = staging / SITE_DIR / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)  # keeps mtimes, so the copied bytecode stays valid
    finish_tree(staging / SITE_DIR)
    (staging / MANIFEST).write_text(json.dumps({"runner": list(runner_pins()), "files": len(files)}))
    try:
        os.rename(staging, shared)  # atomic; refused when another process made it first
    except OSError:
        pass
    if _whole(shared):
        remove_tree(staging)
        return shared / SITE_DIR
    creator = os.getpid()
    atexit.register(lambda: remove_tree(staging) if os.getpid() == creator else None)
    return staging / SITE_DIR


def _whole(folder: Path) -> bool:
    """A folder of ours, writable by nobody else, with its manifest (written last before the rename)."""
    try:
        info = folder.lstat()
        return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022
                and (folder / MANIFEST).is_file() and (folder / SITE_DIR).is_dir())
    except OSError:
        return False


# -- the tree of a built environment --------------------------------------------------------------------


def finish_tree(root: Path) -> tuple[int, int]:
    """Check a freshly installed tree and make it read-only; (bytes, files). A link (of any target),
    a FIFO, socket or device anywhere in it is refused, naming it: host tools (``envs list``, ``prune``,
    a copy) must never be led out of the tree, and the sandbox mounts it as it is."""
    total_bytes = total_files = 0
    for folder, dirs, names in os.walk(root, followlinks=False):
        for name in [*dirs, *names]:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                raise EnvironmentBuildError(f"the built environment holds a link {path} -> {os.readlink(path)}; "
                                            "environments hold plain files only")
            if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
                raise EnvironmentBuildError(f"the built environment holds {path}, not a file or folder")
            if stat.S_ISREG(info.st_mode):
                total_bytes += info.st_blocks * 512
                total_files += 1
                os.chmod(path, 0o555 if info.st_mode & 0o111 else 0o444)  # no setuid, no write
    for folder, dirs, _ in os.walk(root, topdown=False):
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o555)
    os.chmod(root, 0o555)
    return total_bytes, total_files


def remove_tree(root: Path) -> None:
    """Remove a (read-only) environment tree, never following a link."""
    if not os.path.lexists(root):
        return
    if os.path.islink(root):
        os.unlink(root)
        return
    for folder, dirs, _ in os.walk(root, followlinks=False):
        os.chmod(folder, 0o700)
        for name in dirs:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, 0o700)
    shutil.rmtree(root, ignore_errors=True)


# -- the cache ------------------------------------------------------------------------------------------


def envs_home() -> Path:
    return pdbgym_home() / "envs"


def read_environment(folder: Path) -> EnvironmentInfo | None:
    """The environment in ``folder`` when it is whole (manifest and site-packages), else None."""
    try:
        data = json.loads((folder / MANIFEST).read_text())
        if not (folder / SITE_DIR).is_dir() or data.get("key") != folder.name:
            return None
        return EnvironmentInfo(key=data["key"], path=folder, requirements=list(data["requirements"]),
                               runner=list(data["runner"]), python=str(data["python"]),
                               installer=str(data.get("installer", "")), build_s=float(data.get("build_s", 0.0)),
                               bytes=int(data.get("bytes", 0)), files=int(data.get("files", 0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def list_environments() -> list[EnvironmentInfo]:
    """Every whole environment in the cache (staging folders and broken ones left out)."""
    home = envs_home()
    if not home.is_dir():
        return []
    found = [read_environment(p) for p in sorted(home.iterdir()) if not p.name.startswith(".") and p.is_dir()]
    return [info for info in found if info is not None]


def installer_command(target: Path, requirements: Sequence[str]) -> tuple[str, list[str]]:
    """(installer name, argv): ``uv pip install`` where uv is on PATH, else pip; wheels only, into ``target``.

    Each requirement is one argument after ``--`` (never a ``-r`` file, whose ``${VAR}`` the installer would
    expand from the host's environment). pip's own settings (``PIP_INDEX_URL``, ``PIP_FIND_LINKS``,
    ``PIP_NO_INDEX``, its config files) still apply: they come from the user, not from a task."""
    uv = shutil.which("uv")
    if uv:
        return "uv", [uv, "pip", "install", "--target", str(target), "--python", sys.executable,
                      "--only-binary", ":all:", "--compile-bytecode", "--no-progress", "--", *requirements]
    return "pip", [sys.executable, "-m", "pip", "install", "--target", str(target), "--only-binary", ":all:",
                   "--no-input", "--disable-pip-version-check", "--no-warn-script-location", "--", *requirements]


def ensure_environment(requirements: Sequence[str], on_line: Callable[[str], None] | None = None,
                       timeout_s: float = 900.0) -> EnvironmentInfo:
    """The environment of ``requirements`` from the cache, built first when it is not there.

    ``on_line`` gets each line the installer prints (progress). Raises ``EnvironmentBuildError`` naming
    the requirements and the installer's message when the build fails; nothing of a failed build stays."""
    normalized = check_requirements(requirements)
    key = environment_key(normalized)
    home = envs_home()
    final = home / key
    if (found := read_environment(final)) is not None:
        return found
    home.mkdir(parents=True, exist_ok=True)
    with open(home / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building the same key: wait, then reuse it
        if (found := read_environment(final)) is not None:
            return found
        if os.path.lexists(final):  # a folder without its manifest was never renamed here by a build
            remove_tree(final)
        return _build(normalized, key, final, on_line, timeout_s)


def _build(requirements: list[str], key: str, final: Path, on_line: Callable[[str], None] | None,
           timeout_s: float) -> EnvironmentInfo:
    staging = Path(tempfile.mkdtemp(prefix=f".building-{key}-", dir=final.parent))
    try:
        installer, argv = installer_command(staging / SITE_DIR, [*requirements, *runner_pins_for(requirements)])
        started = time.monotonic()
        output = _run_installer(argv, on_line, timeout_s)
        if output is not None:
            named = [r for r in requirements if canonicalize_name(Requirement(r).name) in _names_in(output)]
            raise EnvironmentBuildError(
                f"building the environment of {', '.join(requirements) or 'no requirements'} with {installer} "
                f"failed{' at ' + ', '.join(named) if named else ''}:\n{output[-3000:].strip()}")
        build_s = time.monotonic() - started
        size, files = finish_tree(staging / SITE_DIR)
        manifest = {"key": key, "requirements": requirements, "runner": list(runner_pins_for(requirements)),
                    "python": python_tag(),
                    "installer": installer, "build_s": round(build_s, 3), "bytes": size, "files": files,
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        os.chmod(staging, 0o755)
        os.rename(staging, final)  # the whole tree appears at its key at once
    except BaseException:
        remove_tree(staging)
        raise
    info = read_environment(final)
    assert info is not None
    return info


def _names_in(text: str) -> set[str]:
    return {canonicalize_name(word) for word in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", text)}


def _run_installer(argv: list[str], on_line: Callable[[str], None] | None, timeout_s: float) -> str | None:
    """Run the installer, passing each output line on; None when it succeeded, else its output."""
    lines: list[str] = []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_TARGET", "PIP_PREFIX"))}
    try:
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                              stdin=subprocess.DEVNULL) as process:
            assert process.stdout is not None
            deadline = time.monotonic() + timeout_s
            for line in process.stdout:
                lines.append(line.rstrip("\n"))
                if on_line is not None:
                    on_line(line.rstrip("\n"))
                if time.monotonic() > deadline:
                    process.kill()
                    lines.append(f"(stopped after {timeout_s:g} s)")
                    break
            returncode = process.wait()
    except OSError as exc:
        return f"cannot run {argv[0]}: {exc}"
    return None if returncode == 0 else "\n".join(line for line in lines if not line.startswith("WARNING:"))


def prune_environments(keep: Iterable[str] = ()) -> list[EnvironmentInfo]:
    """Remove every cached environment whose key is not in ``keep``, and leftover staging folders;
    returns the environments removed."""
    home = envs_home()
    if not home.is_dir():
        return []
    kept = set(keep)
    removed = [info for info in list_environments() if info.key not in kept]
    for info in removed:
        remove_tree(info.path)
    stale = time.time() - STAGING_STALE_S
    for entry in home.iterdir():
        if entry.name.startswith(".building-") and entry.lstat().st_mtime < stale \
                or (not entry.name.startswith(".") and entry.name not in kept and read_environment(entry) is None):
            remove_tree(entry)
    return removed
