"""The ``bwrap`` backend: bubblewrap namespaces around the command, with only what Python needs mounted.

The sandbox's root is an empty tmpfs holding, read-only: ``/usr`` (and the ``/bin``, ``/lib*``,
``/sbin`` links or folders), a minimal ``/etc`` (generated ``passwd``/``group``/``hosts``/
``nsswitch.conf``, the dynamic loader's cache, time zone and TLS certificates), the running
interpreter's prefixes and site-packages, and in place of pdbgym's package folder a copy of just the
modules that run in the sandbox (``runtime.py``: the folder also holds every task's answer); read-write:
the workspace only
(less the ``readonly_paths`` a caller binds read-only over it, ``readonly_args``), plus a private
size-bounded ``/tmp`` and ``/dev/shm``. Host homes, ``/root``, ``/run``, ``/var``,
``/etc/shadow``, host sockets, the caller's working folder and the host's ``/tmp`` are not there.
``/proc`` is the sandbox's own (its PID namespace) and read-only, so ``/proc/sys`` and
``/proc/sysrq-trigger`` cannot be written. The command runs as uid/gid 1000 in a user namespace
with every capability dropped and no further user namespaces, no network (a new network namespace
with only a down loopback), own IPC and UTS namespaces, a new session (so TIOCSTI cannot reach the
caller's terminal), and dies with its parent. Limits (rlimits, pids and memory cgroups) are applied
by the shared spawn code before bwrap starts and are inherited by everything inside.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import shutil
import site
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pdbgym.errors import SandboxError
from pdbgym.sandbox.base import Sandbox
from pdbgym.sandbox.limits import Limits
from pdbgym.sandbox.pyenv import ENV_MOUNT, runner_environment
from pdbgym.sandbox.runtime import runtime_args

BWRAP_ENV_VAR = "PDBGYM_BWRAP"  # path of the bwrap binary, when not on PATH
SANDBOX_UID = 1000  # the uid and gid commands run as inside the sandbox
SANDBOX_USER = "sandbox"
# Host /etc entries Python and the C library read; bound read-only where they exist. Anything else in
# /etc (shadow, ssh keys, package manager and service configuration) stays out.
HOST_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "ssl/certs", "ssl/openssl.cnf",
            "ca-certificates", "ca-certificates.conf", "alternatives", "mime.types", "protocols", "services",
            "os-release", "gai.conf", "host.conf")
TOP_LEVEL_SYSTEM = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # links into /usr on merged-/usr systems


def bwrap_path() -> str | None:
    return os.environ.get(BWRAP_ENV_VAR) or shutil.which("bwrap")


@functools.cache
def bwrap_unavailable_reason() -> str | None:
    """None when bubblewrap works here, else why not (missing binary, namespaces refused...)."""
    binary = bwrap_path()
    if binary is None:
        return f"bwrap was not found on PATH (install bubblewrap, or set {BWRAP_ENV_VAR})"
    try:
        with tempfile.TemporaryDirectory(prefix="pdbgym-bwrap-probe-") as scratch:
            probe = BwrapSandbox().wrap([sys.executable, "-c", "pass"], Path(scratch), Limits())  # as run later
            result = subprocess.run(probe, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired, SandboxError) as exc:
        return f"bwrap could not run: {exc}"
    if result.returncode != 0:
        return (f"bwrap cannot create namespaces or run {sys.executable} in them here: "
                f"{result.stderr.strip() or result.returncode}")
    return None


@functools.cache
def _supported_options(binary: str) -> frozenset[str]:
    """Options this bwrap knows (from ``--help``): ``--disable-userns`` needs 0.8, ``--size`` 0.6."""
    try:
        text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    return frozenset(word for word in text.split() if word.startswith("--"))


def _if_supported(binary: str, option: str, *args: str) -> list[str]:
    return [option, *args] if option in _supported_options(binary) else []


def package_dir() -> Path:
    """The folder of the pdbgym package this code runs from.

    Taken from this module's own file, never from ``pdbgym.__file__``: run from the parent folder of a
    clone named ``pdbgym``, ``import pdbgym`` can resolve to the clone folder as a namespace package,
    which has no ``__file__``.
    """
    found = Path(__file__).resolve().parent.parent
    if not (found / "__init__.py").is_file() or not (found / "sandbox").is_dir():
        raise SandboxError(f"cannot locate the pdbgym package: {found} holds no pdbgym/__init__.py; "
                           "reinstall pdbgym (pip install -e .) or run from an installed copy")
    return found


def _pth_folders(site_dirs: list[str]) -> set[str]:
    """Folders that ``.pth`` files in ``site_dirs`` add to sys.path (lines that are paths, not imports)."""
    found: set[str] = set()
    for folder in site_dirs:
        try:
            names = [n for n in os.listdir(folder) if n.endswith(".pth")]
        except OSError:
            continue
        for name in names:
            try:
                lines = Path(folder, name).read_text(errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")):
                    path = Path(folder, line)
                    if path.is_dir():
                        found.add(str(path))
    return found


@functools.cache
def python_roots() -> tuple[str, ...]:
    """Host folders the sandboxed interpreter needs, outermost only: its prefixes, site-packages and the
    folders named by ``.pth`` files. Never ``sys.path`` wholesale: it holds the caller's working folder
    and script folder. Never pdbgym's package folder, nor a ``.pth`` folder holding it (an old-style
    editable install names the whole checkout): ``runtime_args`` binds what runs of it."""
    site_dirs = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    package = package_dir()
    checkouts = {f for f in _pth_folders(site_dirs) if package.is_relative_to(Path(f).resolve())}
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site_dirs,
                  str(Path(sys.executable).resolve().parent.parent), *(_pth_folders(site_dirs) - checkouts)}
    resolved: set[str] = set()
    for candidate in candidates:
        for form in (Path(candidate).absolute(), Path(candidate).resolve()):
            # "/" or /usr itself would be everything, or already there.
            if form.exists() and not form.is_relative_to("/usr") and form != Path("/"):
                resolved.add(str(form))
    # A folder inside one already bound needs no bind of its own.
    return tuple(sorted(p for p in resolved
                        if not any(p != q and Path(p).is_relative_to(q) for q in resolved)))


_ETC_FILES = {
    "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\n{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}:pdbgym "
              f"sandbox:/tmp:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": f"root:x:0:\n{SANDBOX_USER}:x:{SANDBOX_UID}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\nservices: files\nprotocols: files\n",
}


@functools.cache
def _generated_etc() -> Path:
    """The host folder holding the generated /etc files: one per uid and content, shared by every
    process and kept (so no process, killed or forked, leaves copies behind); a private folder removed
    at exit where the shared name is taken by someone else."""
    digest = hashlib.sha256(json.dumps(_ETC_FILES, sort_keys=True).encode()).hexdigest()[:12]
    shared = Path(tempfile.gettempdir()) / f"pdbgym-sandbox-etc-{os.getuid()}-{digest}"
    if _holds_etc(shared):
        return shared
    staging = Path(tempfile.mkdtemp(prefix="pdbgym-sandbox-etc-new-"))
    for name, text in _ETC_FILES.items():
        (staging / name).write_text(text)
        (staging / name).chmod(0o644)
    try:
        os.rename(staging, shared)  # atomic; refused when another process (or user) made it first
    except OSError:
        pass
    if _holds_etc(shared):
        shutil.rmtree(staging, ignore_errors=True)
        return shared
    creator = os.getpid()
    atexit.register(lambda: shutil.rmtree(staging, ignore_errors=True) if os.getpid() == creator else None)
    return staging


def _holds_etc(folder: Path) -> bool:
    """Whether ``folder`` is a real folder of ours, writable by nobody else, holding exactly the files."""
    try:
        info = folder.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            return False
        return all((folder / name).read_text() == text for name, text in _ETC_FILES.items())
    except (OSError, UnicodeDecodeError):
        return False


def _site_dirs() -> list[str]:
    """The interpreter's site-packages folders (both path forms), each hidden behind the shim."""
    dirs = {*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    forms = {str(form) for d in dirs for form in (Path(d).absolute(), Path(d).resolve()) if form.is_dir()}
    return sorted(forms)


_SHIM_PTH = "pdbgym-task-env.pth"


def _shim_files() -> dict[str, bytes]:
    """What the sandbox's site-packages holds: a ``.pth`` adding the task environment (its own ``.pth``
    files processed), and pdbgym's own top-level files of an editable install (its finder), so
    ``import pdbgym`` reaches the runtime copy; nothing of any other distribution."""
    files = {_SHIM_PTH: f"import site; site.addsitedir({ENV_MOUNT!r})\n".encode()}
    for folder in _site_dirs():
        for entry in os.scandir(folder):
            if "pdbgym" in entry.name and entry.name.endswith((".pth", ".py")) and entry.is_file(follow_symlinks=False):
                files[entry.name] = Path(entry.path).read_bytes()
    return files


@functools.cache
def site_shim() -> Path:
    """The host folder bound over the interpreter's site-packages: one per uid and content, kept."""
    files = _shim_files()
    mount_points = sorted({package_dir().name} if any(package_dir().parent == Path(d) for d in _site_dirs()) else set())
    digest = hashlib.sha256(json.dumps([sorted((k, v.hex()) for k, v in files.items()), mount_points]).encode())
    shared = Path(tempfile.gettempdir()) / f"pdbgym-sandbox-site-{os.getuid()}-{digest.hexdigest()[:16]}"
    if _holds_shim(shared, files):
        return shared
    staging = Path(tempfile.mkdtemp(prefix="pdbgym-sandbox-site-new-"))
    for name, data in files.items():
        (staging / name).write_bytes(data)
        (staging / name).chmod(0o644)
    for name in mount_points:  # where the runtime copy of a non-editable pdbgym is bound
        (staging / name).mkdir(mode=0o755)
    staging.chmod(0o755)
    try:
        os.rename(staging, shared)
    except OSError:
        pass
    if _holds_shim(shared, files):
        shutil.rmtree(staging, ignore_errors=True)
        return shared
    creator = os.getpid()
    atexit.register(lambda: shutil.rmtree(staging, ignore_errors=True) if os.getpid() == creator else None)
    return staging


def _holds_shim(folder: Path, files: dict[str, bytes]) -> bool:
    try:
        info = folder.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            return False
        return all((folder / name).read_bytes() == data for name, data in files.items())
    except OSError:
        return False


def environment_args(site_packages: Path | None) -> list[str]:
    """Binds that make ``site_packages`` (None: the runner environment) the interpreter's only
    third-party packages: the shim over each site-packages folder, the environment at ``ENV_MOUNT``."""
    shim = site_shim()
    if not (shim / _SHIM_PTH).is_file():  # removed under us (a /tmp cleaner)
        site_shim.cache_clear()
        shim = site_shim()
    environment = site_packages if site_packages is not None else runner_environment()
    if not environment.is_dir():
        runner_environment.cache_clear()
        if site_packages is not None:
            raise SandboxError(f"the task environment {environment} is gone; rebuild it (pdbgym envs build)")
        environment = runner_environment()
    return [*[arg for folder in _site_dirs() for arg in ("--ro-bind", str(shim), folder)],
            "--ro-bind", str(environment), ENV_MOUNT]


def _etc_args() -> list[str]:
    folder = _generated_etc()
    if not all((folder / name).is_file() for name in _ETC_FILES):  # removed under us (a /tmp cleaner)
        _generated_etc.cache_clear()
        folder = _generated_etc()
    args = [arg for name in _ETC_FILES for arg in ("--ro-bind", str(folder / name), f"/etc/{name}")]
    for name in HOST_ETC:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


def _system_args() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in TOP_LEVEL_SYSTEM:
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def _system_roots() -> list[str]:
    """The system folders ``_system_args`` binds (a system-wide pdbgym lies inside one)."""
    return ["/usr", *(str(Path("/", n)) for n in TOP_LEVEL_SYSTEM
                      if Path("/", n).is_dir() and not Path("/", n).is_symlink())]


def readonly_args(workspace: Path, paths: Sequence[Path]) -> list[str]:
    """Binds that make ``paths`` (inside ``workspace``) read-only and keep them where they are.

    Each path is bound read-only onto itself, so writing it fails with EROFS and replacing or removing
    it with EBUSY (it is a mount point). Each folder between the workspace and a path is first bound
    onto itself (writable): a mount point cannot be renamed, so the command cannot move the folder away
    and put a forged one in its place. Folders come first, outermost first, since a later bind over a
    folder would hide the binds made inside it; a path inside another one needs no bind of its own.
    """
    outermost = sorted({p for p in paths if not any(p != q and p.is_relative_to(q) for q in paths)})
    folders = sorted({str(parent) for p in outermost for parent in p.parents
                      if parent != workspace and parent.is_relative_to(workspace)},
                     key=lambda f: (f.count("/"), f))
    args = [arg for folder in folders for arg in ("--bind", folder, folder)]
    return args + [arg for p in outermost for arg in ("--ro-bind", str(p), str(p))]


class BwrapSandbox(Sandbox):
    name = "bwrap"
    isolated = True
    binds_readonly = True
    mounts_environments = True

    def wrap(self, argv: list[str], workspace: Path, limits: Limits,
             readonly_paths: Sequence[Path] = ()) -> list[str]:
        binary = bwrap_path() or "bwrap"
        workspace_dir = str(workspace)
        size = str(limits.tree_memory_limit)  # tmpfs pages are memory: bound them like the process tree
        return [
            binary,
            # uid 1000 in a user namespace; run by root, it maps to root outside (see docs/sandbox.md):
            # what protects host files is that they are not mounted.
            "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            *_if_supported(binary, "--disable-userns"),
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--hostname", "sandbox",
            *_system_args(),
            *_etc_args(),
            "--dev", "/dev",
            "--proc", "/proc",
            "--remount-ro", "/proc",  # /proc/sys, /proc/sysrq-trigger: no host kernel settings written
            *_if_supported(binary, "--size", size), "--tmpfs", "/tmp",
            *_if_supported(binary, "--size", size), "--tmpfs", "/dev/shm",
            # POSIX message queues of the sandbox's own IPC namespace, listed where they can be removed (a
            # fork server's sweep); then /dev itself read-only (its device nodes still open for writing):
            # nothing can be planted there for a later command of a long-lived sandbox.
            "--mqueue", "/dev/mqueue",
            "--remount-ro", "/dev",
            # After the /tmp tmpfs, so an interpreter or a workspace under /tmp is the real one.
            *[arg for path in python_roots() for arg in ("--ro-bind", path, path)],
            # Over the roots: the interpreter's site-packages shows the task's environment only.
            *environment_args(self.site_packages),
            # After the roots, so the copy hides the real package folder inside one of them too.
            *runtime_args(package_dir(), [*_system_roots(), *python_roots()]),
            "--bind", workspace_dir, workspace_dir,
            *readonly_args(workspace, readonly_paths),
            "--remount-ro", "/",  # the root tmpfs and its folders (/etc...): nothing planted there either
            "--chdir", workspace_dir,
            "--cap-drop", "ALL",
            "--new-session",
            "--die-with-parent",
            "--",
            *argv,
        ]
