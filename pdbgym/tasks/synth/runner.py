"""Run a project's pytest suite (or some of its tests) confined, and read back per-test outcomes.

Every execution of untrusted project code in synthesis goes through :func:`execute`, which hands the
command to the pdbgym sandbox (bubblewrap where it works, rlimits otherwise).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from pdbgym.errors import SandboxError
from pdbgym.sandbox import Limits, PtyProcess, RunResult, Sandbox, get_sandbox, sandbox_env
from pdbgym.sandbox.pyenv import ensure_environment
from pdbgym.tasks.synth import hotserver, probe, zygote

# Per-run files in the workspace; ``{run}`` makes them unique, since runs may share a workspace.
PROBE_FILE = ".pdbgym_probe-{run}.json"
TIMEOUTS_FILE = ".pdbgym_timeouts-{run}.json"
SELECT_FILE = ".pdbgym_select-{run}.json"
HOT_DIR = "hot"  # below a server root: one clean project copy per hot server
PASSED = "passed"
# Outcomes that count as "the test did not pass"; tests absent from a run's report count as failed too.
NOT_PASSED = ("failed", "error", "timeout", "missing")


@dataclass
class SuiteRun:
    """Per-test results of one pytest run. ``outcomes`` maps node id -> passed/failed/error/timeout/skipped."""

    outcomes: dict[str, str]
    durations: dict[str, float] = field(default_factory=dict)
    coverage: dict[str, list[str]] = field(default_factory=dict)
    import_time: list[str] = field(default_factory=list)
    collect_errors: list[str] = field(default_factory=list)
    timed_out: bool = False
    output_tail: str = ""
    changed: list[str] | None = None  # a hot run that re-executed a module: the names whose value changed

    def outcome(self, node_id: str) -> str:
        return self.outcomes.get(node_id, "missing")

    def timeouts(self) -> list[str]:
        return sorted(n for n, o in self.outcomes.items() if o == "timeout")


# The pinned requirements (JSON) of the project being synthesized, set by the engine around a source's
# pool so its worker processes inherit them: every run of the project sees its environment.
REQUIREMENTS_VAR = "PDBGYM_SYNTH_REQUIREMENTS"


def project_requirements() -> list[str]:
    """The requirements of the project being synthesized in this process (``REQUIREMENTS_VAR``)."""
    return list(json.loads(os.environ.get(REQUIREMENTS_VAR) or "[]"))


def _sandbox() -> Sandbox:
    return _sandbox_for(tuple(project_requirements()))


@functools.cache
def _sandbox_for(requirements: tuple[str, ...]) -> Sandbox:
    sandbox = get_sandbox("auto")
    if not requirements:
        return sandbox
    if not sandbox.mounts_environments:
        raise SandboxError(f"synthesizing a project with dependencies needs the bwrap sandbox, not {sandbox.name}")
    return sandbox.with_site_packages(ensure_environment(requirements).site_packages)  # built by the engine


def execute(argv: list[str], workspace: Path, wall_time_s: float, env_extra: dict[str, str]) -> RunResult:
    """The one place synthesis runs project code: in the sandbox, with a wall-clock limit in seconds."""
    limits = Limits(wall_time_s=wall_time_s, cpu_time_s=max(10, int(wall_time_s) + 5))
    return _sandbox().run(argv, workspace, limits, env=sandbox_env(workspace, env_extra))


class _ServerProcess:
    """A long-lived sandboxed Python process spoken to in JSON lines over its pty."""

    def __init__(self, root: Path, argv: list[str], env_extra: dict[str, str], ready_prefix: str,
                 start_timeout_s: float) -> None:
        self.root = root
        self.owner_pid = os.getpid()  # a forked pool worker must start its own, never share this pty
        limits = Limits(wall_time_s=86_400, cpu_time_s=86_400)
        env = sandbox_env(root, {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0", **env_extra})
        self.process: PtyProcess = _sandbox().spawn_pty([sys.executable, "-m", *argv], root, limits, env)
        self._buffer = b""
        line = self._read_line(timeout_s=start_timeout_s)
        if line is None or not line.startswith(ready_prefix):
            self.process.kill()
            raise RuntimeError(f"{argv[0]} did not start (last line {line!r})")

    def _read_line(self, timeout_s: float) -> str | None:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            chunk = self.process.read(remaining) if remaining > 0 else None
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode(errors="replace").strip()

    def _request(self, line: str, timeout_s: float) -> dict:
        """Send one job line; return the decoded ``RESULT`` reply. Raises RuntimeError if the server is gone."""
        self.process.write((line + "\n").encode())
        reply = self._read_line(timeout_s)
        if reply is None or not reply.startswith(zygote.RESULT_PREFIX):
            self.process.kill()
            raise RuntimeError(f"the server stopped answering (last line {reply!r})")
        return json.loads(reply.removeprefix(zygote.RESULT_PREFIX))


class ForkServer(_ServerProcess):
    """Client of a sandboxed :mod:`zygote` whose workspace is ``root``; jobs must run in folders below it."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, [zygote.__name__], {}, "READY", start_timeout_s=120.0)

    def run(self, cwd: Path, args: list[str], env: dict[str, str], wall_time_s: float) -> tuple[bool, str]:
        """Run one pytest job; returns (timed_out, log tail). Raises RuntimeError if the server is gone."""
        log = cwd / f".pytest_log-{uuid.uuid4().hex}"
        job = {"cwd": str(cwd), "args": args, "env": env, "log": str(log), "wall_time_s": wall_time_s}
        result = self._request(json.dumps(job), wall_time_s + 30.0)
        tail = log.read_text(errors="replace")[-3000:] if log.is_file() else ""
        log.unlink(missing_ok=True)
        return bool(result["timed_out"]), tail


class HotRunner(_ServerProcess):
    """Client of a sandboxed :mod:`hotserver` holding a collected clean copy of a project.

    ``try_mutant`` runs a mutant's tests by swapping one function's code in a fork of that session;
    it returns None when the mutant cannot be applied that way, and the caller runs it from files."""

    JOBS = ".pdbgym_hot"

    def __init__(self, workspace: Path, per_test_timeout_s: float, import_time: list[str]) -> None:
        jobs = workspace / self.JOBS
        jobs.mkdir(parents=True, exist_ok=True)
        marks = jobs / "import_time.txt"
        marks.write_text("\n".join(import_time))
        args = [hotserver.__name__, *_pytest_args(per_test_timeout_s)]
        super().__init__(workspace, args, {hotserver.IMPORT_TIME_ENV: str(marks)}, hotserver.READY_PREFIX,
                         start_timeout_s=300.0)
        self.jobs = jobs

    def try_mutant(self, relpath: str, source: str, tests: list[str], timeouts: dict[str, float],
                   wall_time_s: float, narrowing: dict | None = None) -> SuiteRun | None:
        """Run ``tests`` on the mutant; None when it cannot be applied here. When its module is
        re-executed, ``narrowing`` (see :func:`hotserver.narrowed`) lets the run leave out the tests
        that cannot see the names whose value changed; the result's ``changed`` lists those names."""
        paths = {name: self.jobs / f"{name}-{os.getpid()}" for name in ("source", "job", "out", "log", "changed")}
        try:
            paths["source"].write_bytes(source.encode())
            job = {"file": relpath, "source_path": str(paths["source"]), "tests": tests, "timeouts": timeouts,
                   "out": str(paths["out"]), "log": str(paths["log"]), "wall_time_s": wall_time_s,
                   "changed": str(paths["changed"]), "narrowing": narrowing}
            paths["job"].write_text(json.dumps(job))
            result = self._request(str(paths["job"]), wall_time_s + 30.0)
            if not result.get("patched"):
                return None
            tail = paths["log"].read_text(errors="replace")[-3000:] if paths["log"].is_file() else ""
            run = _suite_run(_read_probe(paths["out"]), bool(result["timed_out"]), tail)
            run.changed = result.get("changed")
            return run
        finally:
            for path in paths.values():
                path.unlink(missing_ok=True)


_servers: dict[Path, _ServerProcess] = {}


def fork_server(root: Path) -> ForkServer:
    """This process's fork server for ``root`` (started on first use, stopped at exit)."""
    root = Path(root).resolve()
    server = _servers.get(root)
    if not isinstance(server, ForkServer) or server.owner_pid != os.getpid() or not server.process.alive:
        server = _servers[root] = ForkServer(root)
    return server


def hot_runner(project_root: Path, server_root: Path, per_test_timeout_s: float,
               import_time: list[str]) -> HotRunner | None:
    """This process's hot server for a project (a private clean copy below ``server_root``, collected
    once); None when it cannot start or has died, and then the caller runs mutants from files."""
    workspace = (Path(server_root) / HOT_DIR / str(os.getpid()) / "ws").resolve()
    server = _servers.get(workspace)
    if isinstance(server, HotRunner) and server.owner_pid == os.getpid():
        return server if server.process.alive else None
    if workspace in _servers:  # inherited from a parent process by fork: not ours to use
        del _servers[workspace]
    shutil.rmtree(workspace.parent, ignore_errors=True)
    shutil.copytree(project_root, workspace, ignore=shutil.ignore_patterns(".*"))
    try:
        _servers[workspace] = HotRunner(workspace, per_test_timeout_s, import_time)
    except (RuntimeError, OSError):
        return None
    return _servers[workspace]  # type: ignore[return-value]


def stop_servers(below: Path | None = None) -> None:
    """Stop this process's servers (those rooted under ``below`` only, when given)."""
    for root, server in list(_servers.items()):
        if below is None or root.is_relative_to(Path(below).resolve()):
            if server.owner_pid == os.getpid():
                server.process.close()
            del _servers[root]


atexit.register(stop_servers)


def copy_bytecode(clean_root: Path, workspace: Path) -> None:
    """Copy the ``__pycache__`` folders of a clean project (written by its baseline runs) into a copy of
    it, for every folder the copy has. Rewriting a large test module's asserts costs pytest more than
    running its tests; a copied cache entry is used only while the source file's mtime and size match
    it (copies keep mtimes), so a mutated module is always compiled afresh (see :func:`write_mutant`)."""
    for cache in clean_root.rglob("__pycache__"):
        target = workspace / cache.relative_to(clean_root)
        if target.parent.is_dir() and not target.exists():
            shutil.copytree(cache, target)


def read_source(path: Path) -> str:
    """A source file's text with its line endings as they are (a CRLF file stays CRLF in its mutants,
    so the reference patch restores the clean file byte for byte)."""
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()


def write_mutant(path: Path, source: str) -> None:
    """Write a mutated module over its clean copy, making sure its mtime differs from the clean file's
    (a bytecode cache entry of the clean file must never be taken for the mutant's)."""
    clean_mtime = int(path.stat().st_mtime)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(source)
    if int(path.stat().st_mtime) == clean_mtime:
        os.utime(path, (clean_mtime + 2, clean_mtime + 2))


def _pytest_args(per_test_timeout_s: float) -> list[str]:
    # Native tracebacks: synthesis reads outcomes only, and pytest's long failure reports cost 30-40 ms
    # per failing test, more than most tests take to run.
    return ["-q", "-p", "no:cacheprovider", "-p", probe.__name__, "-p", "timeout", "--timeout", f"{per_test_timeout_s:g}",
            "--tb=native"]


def _read_probe(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    finally:
        path.unlink(missing_ok=True)


def _suite_run(payload: dict, timed_out: bool, output_tail: str) -> SuiteRun:
    return SuiteRun(
        outcomes=payload.get("outcomes", {}),
        durations=payload.get("durations", {}),
        coverage=payload.get("coverage", {}),
        import_time=payload.get("import_time", []),
        collect_errors=payload.get("collect_errors", []),
        timed_out=timed_out,
        output_tail=output_tail[-3000:],
    )


def run_pytest(
    workspace: Path,
    node_ids: list[str] | None = None,
    *,
    per_test_timeout_s: float = 5.0,
    wall_time_s: float = 300.0,
    collect_coverage: bool = False,
    server_root: Path | None = None,
    write_bytecode: bool = False,
    timeouts: dict[str, float] | None = None,
    stop_on_timeout: bool = False,
) -> SuiteRun:
    """Run ``python -m pytest`` in ``workspace`` on ``node_ids`` (None = the whole suite): pytest is given
    their files, and the probe keeps exactly the listed tests of what it collects.

    Each test is cut after ``per_test_timeout_s`` seconds (pytest-timeout); the whole run after
    ``wall_time_s``. With ``collect_coverage`` the probe records which workspace functions each test
    entered. With ``server_root`` (a folder holding ``workspace``) the run is a fork of that folder's
    warm pytest server instead of a fresh interpreter. Nothing is left behind in the workspace except
    the sandbox's HOME folder, and, with ``write_bytecode``, ``__pycache__`` folders (pytest's
    assertion-rewritten test modules among them, which later copies reuse: see :func:`copy_bytecode`).
    ``timeouts`` gives listed tests their own limit instead of ``per_test_timeout_s``;
    ``stop_on_timeout`` ends the run at the first test past its limit.
    """
    workspace = Path(workspace).resolve()
    run_id = uuid.uuid4().hex
    probe_path = workspace / PROBE_FILE.format(run=run_id)
    files = sorted({node.split("::", 1)[0] for node in node_ids or []})
    pytest_args = [*_pytest_args(per_test_timeout_s), *files]
    env = {probe.OUT_ENV: str(probe_path), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0",
           "PYTHONDONTWRITEBYTECODE": "" if write_bytecode else "1"}
    if collect_coverage:
        env[probe.ROOT_ENV] = str(workspace) + "/"
    select_path = workspace / SELECT_FILE.format(run=run_id)
    if node_ids is not None:
        select_path.write_text(json.dumps(sorted(node_ids)))
        env[probe.SELECT_ENV] = str(select_path)
    timeouts_path = workspace / TIMEOUTS_FILE.format(run=run_id)
    if timeouts:
        timeouts_path.write_text(json.dumps(timeouts))
        env[probe.TIMEOUTS_ENV] = str(timeouts_path)
    if stop_on_timeout:
        env[probe.STOP_ENV] = "1"
    if server_root is not None:
        env[probe.FAST_EXIT_ENV] = "1"  # a forked child needs no tidy interpreter shutdown
        try:
            timed_out, tail = fork_server(server_root).run(workspace, pytest_args, env, wall_time_s)
        except RuntimeError as exc:
            timed_out, tail = True, str(exc)
        result = RunResult([], None, tail, timed_out, 0.0, len(tail), False)
    else:
        result = execute([sys.executable, "-m", "pytest", *pytest_args], workspace, wall_time_s, env)
    timeouts_path.unlink(missing_ok=True)
    select_path.unlink(missing_ok=True)
    return _suite_run(_read_probe(probe_path), result.timed_out, result.output)
