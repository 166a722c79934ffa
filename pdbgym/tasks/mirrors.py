"""The git side of importing published SWE-bench rows: find the row's repository (a local mirror or a
clone cached under ``$PDBGYM_HOME/repos``) and write the tree of its ``base_commit`` into a folder.

A mirror is hostile input: its config can name filter, fsmonitor or hook commands, its ``.gitattributes``
can ask for smudge filters, ``export-ignore`` or ``export-subst``, and a crafted tree can hold paths
like ``../x`` or ``.git/config``. So git never runs inside a mirror. It runs in a scratch bare repository
of ours whose ``objects/info/alternates`` names the mirror's object store (git reads objects there, and
nothing else of the mirror: no config, hooks or attributes), with the system and global config off
and hooks pointed at ``/dev/null``. The tree is written by Python from ``git ls-tree`` and
``git cat-file --batch`` (blob bytes exactly as committed: no filter, no end-of-line conversion, nothing
left out), each path checked and written without following links.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from pdbgym.errors import PdbgymError
from pdbgym.paths import pdbgym_home

GIT_BASE_URL_ENV = "PDBGYM_GIT_BASE_URL"  # where clones come from; tests point it at a file:// folder
DEFAULT_GIT_BASE_URL = "https://github.com"
CLONE_TIMEOUT_S = 3600.0  # a large repository (pandas, django) over a slow link
_NAME = re.compile(r"[A-Za-z0-9._-]+")
_COMMIT = re.compile(r"[0-9a-fA-F]{7,40}")
_SAFE_CONFIG = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "protocol.ext.allow=never")


class MirrorError(PdbgymError):
    """A row's repository or commit cannot be found, fetched or exported."""


class MissingCommitError(MirrorError):
    """The object store has no commit of that sha (a clone older than the row, or a wrong sha)."""


def repo_name_problem(value: object) -> str | None:
    """Why ``value`` is not a usable ``owner/name`` (it becomes folder names and a URL), or None."""
    if not isinstance(value, str):
        return f"must be a string 'owner/name', got {type(value).__name__}"
    parts = value.split("/")
    if len(parts) != 2 or not all(_NAME.fullmatch(p) for p in parts):
        return f"must be 'owner/name' of letters, digits, '.', '_' and '-'; got {value[:80]!r}"
    if any(p in (".", "..") or p.startswith("-") for p in parts):
        return f"must be 'owner/name' with no '.', '..' or leading '-' part; got {value!r}"
    return None


def commit_problem(value: object) -> str | None:
    """Why ``value`` is not a commit sha (7 to 40 hex digits: never a ref name or an option), or None."""
    if isinstance(value, str) and _COMMIT.fullmatch(value):
        return None
    shown = value[:80] if isinstance(value, str) else type(value).__name__
    return f"must be a commit sha, full or abbreviated (7 to 40 hex digits); got {shown!r}"


def git_env(user_config: bool = False) -> dict[str, str]:
    """git's environment: no system config, no inherited ``GIT_*`` (a ``GIT_DIR`` would redirect it), no
    credential prompt; the user's global config only for clones (their proxy, their URL rewrites)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_ATTR_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
    if not user_config:
        env["GIT_CONFIG_GLOBAL"] = os.devnull
    return env


def _git(git_dir: Path, *args: str, timeout: float = 600.0) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *_SAFE_CONFIG, f"--git-dir={git_dir}", *args], capture_output=True,
                          timeout=timeout, env=git_env(), stdin=subprocess.DEVNULL)


def _said(proc: subprocess.CompletedProcess[bytes]) -> str:
    said = " ".join(proc.stderr.decode(errors="replace").split())  # one line: it goes into a table cell
    return said[-400:] or f"exit status {proc.returncode}"


def mirror_candidates(mirrors: Path, repo: str) -> list[Path]:
    """Where a mirror of ``owner/name`` may sit under ``mirrors``, in the order they are tried."""
    owner, name = repo.split("/")
    return [mirrors / owner / name, mirrors / owner / f"{name}.git", mirrors / f"{owner}__{name}",
            mirrors / f"{owner}__{name}.git"]


def objects_dir(repository: Path) -> Path | None:
    """The object store of the git repository at ``repository`` (bare, with ``.git/``, or a worktree's
    ``.git`` file), or None when it is not one. Only the layout is read; no git runs there."""
    git_dir = repository / ".git" if os.path.lexists(repository / ".git") else repository
    try:
        if git_dir.is_file():  # a linked worktree or a submodule: "gitdir: PATH"
            text = git_dir.read_text(errors="replace").strip()
            if not text.startswith("gitdir:"):
                return None
            git_dir = repository / text[len("gitdir:"):].strip()
        if (git_dir / "commondir").is_file():
            git_dir = git_dir / (git_dir / "commondir").read_text(errors="replace").strip()
    except OSError:
        return None
    objects = git_dir / "objects"
    return objects.resolve() if objects.is_dir() and (git_dir / "HEAD").is_file() else None


def clone_cache() -> Path:
    """Bare clones made by imports, one per repository (``pdbgym store prune repos`` removes them)."""
    return pdbgym_home() / "repos"


def clone_url(repo: str) -> str:
    return f"{(os.environ.get(GIT_BASE_URL_ENV) or DEFAULT_GIT_BASE_URL).rstrip('/')}/{repo}"


@dataclass
class RepoSource:
    """Finds each row's repository: ``--mirrors`` first, then the clone cache, then a fresh clone.

    A repository that could not be found or cloned is remembered, so the next rows of the same
    repository fail at once with the same message instead of trying the network again.
    """

    mirrors: Path | None = None
    clone: bool = True
    _failed: dict[str, str] = field(default_factory=dict, init=False)

    def export(self, repo: str, commit: str, dest: Path) -> str:
        """Write the tree of ``commit`` of ``repo`` into ``dest`` (a new folder); returns a line saying
        where it came from and the full sha."""
        objects, origin, cached = self._find(repo)
        try:
            full = export_tree(objects, commit, dest)
        except MissingCommitError:
            if not cached:
                raise MirrorError(f"commit {commit} is not in the mirror at {origin}; fetch it into that clone "
                                  "(git fetch, with the branch or pull request that holds it) or fix 'base_commit'"
                                  ) from None
            _fetch(objects.parent, repo, commit)
            shutil.rmtree(dest, ignore_errors=True)
            full = export_tree(objects, commit, dest)
        return f"{'clone' if cached else 'mirror'} {origin} @ {full[:12]}"

    def _find(self, repo: str) -> tuple[Path, Path, bool]:
        """(object store, the repository, whether it is our clone cache)."""
        if repo in self._failed:
            raise MirrorError(self._failed[repo])
        looked: list[str] = []
        for candidate in mirror_candidates(self.mirrors, repo) if self.mirrors else []:
            if not os.path.lexists(candidate):
                looked.append(f"{candidate} (absent)")
            elif (objects := objects_dir(candidate)) is not None:
                return objects, candidate, False
            else:
                looked.append(f"{candidate} (not a git repository)")
        cached = clone_cache() / f"{repo.replace('/', '__')}.git"
        if (objects := objects_dir(cached)) is not None:
            return objects, cached, True
        looked.append(f"{cached} (no clone yet)")
        problem = "cloning is off" if not self.clone else _clone(clone_url(repo), cached)
        if problem is None and (objects := objects_dir(cached)) is not None:
            return objects, cached, True
        where = ", ".join(looked)
        hint = (f"pass --mirrors DIR holding a clone of {repo} at DIR/{repo}, DIR/{repo}.git, "
                f"DIR/{repo.replace('/', '__')} or DIR/{repo.replace('/', '__')}.git (bare or not)")
        self._failed[repo] = f"no repository for {repo}: looked at {where}; {problem}; {hint}"
        raise MirrorError(self._failed[repo])


def _clone(url: str, dest: Path) -> str | None:
    """Clone ``url`` bare into ``dest`` (through a staging folder: a killed clone leaves no half cache);
    None when done, else what went wrong."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f".cloning-{os.getpid()}-{dest.name}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        proc = subprocess.run(["git", *_SAFE_CONFIG, "clone", "--bare", "--quiet", "--", url, str(staging)],
                              capture_output=True, timeout=CLONE_TIMEOUT_S, env=git_env(user_config=True),
                              stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            return f"cloning {url} failed ({_said(proc)})"
        try:
            staging.rename(dest)
        except OSError:  # another import cloned it meanwhile: keep theirs
            if objects_dir(dest) is None:
                raise
        return None
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cloning {url} failed ({exc})"
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _fetch(git_dir: Path, repo: str, commit: str) -> None:
    """Bring a commit the cached clone lacks (the clone is older than the row): branches and tags, then
    the commit itself by its full sha (GitHub serves any reachable one)."""
    url = clone_url(repo)
    refs = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
    tries = [refs, (commit,)] if len(commit) == 40 else [refs]
    said = ""
    for wanted in tries:
        proc = subprocess.run(["git", *_SAFE_CONFIG, f"--git-dir={git_dir}", "fetch", "--quiet", "--", url,
                               *wanted], capture_output=True, timeout=CLONE_TIMEOUT_S,
                              env=git_env(user_config=True), stdin=subprocess.DEVNULL)
        said = _said(proc)
        if _git(git_dir, "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0:
            return
    raise MirrorError(f"commit {commit} is not in {repo} at {url} (fetched into {git_dir}: {said}); "
                      "fix 'base_commit' or pass --mirrors with a repository that holds it")


def export_tree(objects: Path, commit: str, dest: Path) -> str:
    """Write the tree of ``commit`` (found in the object store ``objects``) into the new folder ``dest``,
    byte for byte, without ``.git``; returns the full sha. See the module docstring for why this way."""
    if (problem := commit_problem(commit)) is not None:
        raise MirrorError(f"base_commit {problem}")
    with tempfile.TemporaryDirectory(prefix="pdbgym-git-") as scratch:
        git_dir = Path(scratch) / "scratch.git"
        for folder in ("objects/info", "refs/heads", "refs/tags"):
            (git_dir / folder).mkdir(parents=True)
        (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
        (git_dir / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = true\n")
        (git_dir / "objects" / "info" / "alternates").write_text(f"{objects}\n")
        resolved = _git(git_dir, "rev-parse", "--verify", f"{commit}^{{commit}}")
        if resolved.returncode != 0 and "ambiguous" in _said(resolved):
            raise MirrorError(f"the abbreviated commit {commit} names several objects; give the full sha")
        if resolved.returncode != 0:
            raise MissingCommitError(f"commit {commit} not found ({_said(resolved)})")
        full = resolved.stdout.decode().strip()
        listed = _git(git_dir, "ls-tree", "-r", "-z", "--full-tree", full)
        if listed.returncode != 0:
            raise MirrorError(f"cannot list the tree of {full}: {_said(listed)}")
        entries = list(_entries(listed.stdout, full))
        dest.mkdir(parents=True)
        _write_entries(git_dir, entries, dest)
    return full


def _entries(listing: bytes, commit: str) -> Iterator[tuple[str, str, str]]:
    """(mode, object sha, path) of each entry of ``git ls-tree -r -z``, every path checked."""
    for record in listing.split(b"\0"):
        if not record:
            continue
        head, _, raw = record.partition(b"\t")
        mode, kind, sha = head.decode().split()
        path = os.fsdecode(raw)
        parts = path.split("/")
        if any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
            raise MirrorError(f"the tree of {commit} holds the path {path[:120]!r}, which could leave the task's "
                              "repo/ or plant a repository in it; refused (this mirror is not a plain clone)")
        if kind not in ("blob", "commit"):
            raise MirrorError(f"the tree of {commit} holds {path[:120]!r} of unknown kind {kind!r}")
        yield mode, sha, path


def _parent_folder(dest: Path, path: str) -> Path:
    """The folder of ``path`` under ``dest``, made as needed; never through a link (a crafted tree can
    hold a link ``a`` and a file ``a/x``)."""
    here = dest
    for part in path.split("/")[:-1]:
        here = here / part
        if here.is_symlink() or (os.path.lexists(here) and not here.is_dir()):
            raise MirrorError(f"the tree holds {path[:120]!r} below a link or a file; refused")
        if not os.path.lexists(here):
            here.mkdir()
    return here


def _write_entries(git_dir: Path, entries: list[tuple[str, str, str]], dest: Path) -> None:
    blobs = [(mode, sha, path) for mode, sha, path in entries if mode != "160000"]
    for mode, _, path in entries:
        if mode == "160000":  # a submodule: its folder, empty, as git archive writes it
            (_parent_folder(dest, path) / path.rsplit("/", 1)[-1]).mkdir()
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(["git", *_SAFE_CONFIG, f"--git-dir={git_dir}", "cat-file", "--batch"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=git_env())
        assert proc.stdin is not None and proc.stdout is not None
        feeder = threading.Thread(target=_feed, args=(proc.stdin, [sha for _, sha, _ in blobs]), daemon=True)
        feeder.start()
        try:
            for mode, sha, path in blobs:
                _write_blob(proc.stdout, mode, sha, dest, path)
        finally:
            proc.kill()
            proc.wait()
            feeder.join()


def _feed(stdin: IO[bytes], shas: list[str]) -> None:
    try:
        for sha in shas:
            stdin.write(f"{sha}\n".encode())
        stdin.close()
    except (BrokenPipeError, ValueError):  # the reader stopped first (an error, reported there)
        pass


def _write_blob(stdout: IO[bytes], mode: str, sha: str, dest: Path, path: str) -> None:
    header = stdout.readline().decode(errors="replace").split()
    if len(header) != 3 or header[0] != sha or header[1] != "blob":
        raise MirrorError(f"the object store does not hold blob {sha} of {path[:120]!r} ({' '.join(header)})")
    size = int(header[2])
    data = stdout.read(size)
    stdout.read(1)  # the newline after each object
    if len(data) != size:
        raise MirrorError(f"git stopped while reading {path[:120]!r}")
    target = _parent_folder(dest, path) / path.rsplit("/", 1)[-1]
    if os.path.lexists(target):
        raise MirrorError(f"the tree holds {path[:120]!r} twice; refused")
    if mode == "120000":
        if b"\0" in data:
            raise MirrorError(f"the tree holds a link {path[:120]!r} whose target has a NUL byte; refused")
        os.symlink(os.fsdecode(data), target)
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    descriptor = os.open(target, flags, 0o755 if mode == "100755" else 0o644)
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)
