"""Run a project's pytest suite (or some of its tests) confined, and read back per-test outcomes.

Every execution of untrusted project code in synthesis goes through :func:`execute`, which hands the
command to the pdbgym sandbox (bubblewrap where it works, rlimits otherwise).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pdbgym.sandbox import Limits, PtyProcess, RunResult, Sandbox, get_sandbox, sandbox_env
from pdbgym.tasks.synth import probe, zygote

PROBE_FILE = ".pdbgym_probe.json"
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

    def outcome(self, node_id: str) -> str:
        return self.outcomes.get(node_id, "missing")

    def timeouts(self) -> list[str]:
        return sorted(n for n, o in self.outcomes.items() if o == "timeout")


@functools.cache
def _sandbox() -> Sandbox:
    return get_sandbox("auto")


def execute(argv: list[str], workspace: Path, wall_time_s: float, env_extra: dict[str, str]) -> RunResult:
    """The one place synthesis runs project code: in the sandbox, with a wall-clock limit in seconds."""
    limits = Limits(wall_time_s=wall_time_s, cpu_time_s=max(10, int(wall_time_s) + 5))
    return _sandbox().run(argv, workspace, limits, env=sandbox_env(workspace, env_extra))


class ForkServer:
    """Client of a sandboxed :mod:`zygote` whose workspace is ``root``; jobs must run in folders below it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.owner_pid = os.getpid()  # a forked pool worker must start its own, never share this pty
        limits = Limits(wall_time_s=86_400, cpu_time_s=86_400)
        env = sandbox_env(root, {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"})
        self.process: PtyProcess = _sandbox().spawn_pty([sys.executable, "-m", zygote.__name__], root, limits, env)
        self._buffer = b""
        if self._read_line(timeout_s=120.0) != "READY":
            self.process.kill()
            raise RuntimeError("the pytest fork server did not start")

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

    def run(self, cwd: Path, args: list[str], env: dict[str, str], wall_time_s: float) -> tuple[bool, str]:
        """Run one pytest job; returns (timed_out, log tail). Raises RuntimeError if the server is gone."""
        log = cwd / ".pytest_log"
        job = {"cwd": str(cwd), "args": args, "env": env, "log": str(log), "wall_time_s": wall_time_s}
        self.process.write((json.dumps(job) + "\n").encode())
        line = self._read_line(wall_time_s + 30.0)
        if line is None or not line.startswith(zygote.RESULT_PREFIX):
            self.process.kill()
            raise RuntimeError(f"the pytest fork server stopped answering (last line {line!r})")
        result = json.loads(line.removeprefix(zygote.RESULT_PREFIX))
        tail = log.read_text(errors="replace")[-3000:] if log.is_file() else ""
        log.unlink(missing_ok=True)
        return bool(result["timed_out"]), tail


_servers: dict[Path, ForkServer] = {}


def fork_server(root: Path) -> ForkServer:
    """This process's fork server for ``root`` (started on first use, stopped at exit)."""
    root = Path(root).resolve()
    server = _servers.get(root)
    if server is None or server.owner_pid != os.getpid() or not server.process.alive:
        server = _servers[root] = ForkServer(root)
    return server


@atexit.register
def _stop_servers() -> None:
    for server in _servers.values():
        if server.owner_pid == os.getpid():
            server.process.close()


def run_pytest(
    workspace: Path,
    node_ids: list[str] | None = None,
    *,
    per_test_timeout_s: float = 5.0,
    wall_time_s: float = 300.0,
    collect_coverage: bool = False,
    server_root: Path | None = None,
) -> SuiteRun:
    """Run ``python -m pytest`` in ``workspace`` on ``node_ids`` (None = the whole suite).

    Each test is cut after ``per_test_timeout_s`` seconds (pytest-timeout); the whole run after
    ``wall_time_s``. With ``collect_coverage`` the probe records which workspace functions each test
    entered. With ``server_root`` (a folder holding ``workspace``) the run is a fork of that folder's
    warm pytest server instead of a fresh interpreter. Nothing is left behind in the workspace except
    the sandbox's HOME folder.
    """
    workspace = Path(workspace).resolve()
    probe_path = workspace / PROBE_FILE
    probe_path.unlink(missing_ok=True)
    pytest_args = ["-q", "-p", "no:cacheprovider", "-p", probe.__name__,
                   "-p", "timeout", "--timeout", f"{per_test_timeout_s:g}", *(node_ids or [])]
    env = {probe.OUT_ENV: str(probe_path), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"}
    if collect_coverage:
        env[probe.ROOT_ENV] = str(workspace) + "/"
    if server_root is not None:
        try:
            timed_out, tail = fork_server(server_root).run(workspace, pytest_args, env, wall_time_s)
        except RuntimeError as exc:
            timed_out, tail = True, str(exc)
        result = RunResult([], None, tail, timed_out, 0.0, len(tail), False)
    else:
        result = execute([sys.executable, "-m", "pytest", *pytest_args], workspace, wall_time_s, env)
    try:
        payload = json.loads(probe_path.read_text())
    except (OSError, json.JSONDecodeError):
        payload = {}
    finally:
        probe_path.unlink(missing_ok=True)
    return SuiteRun(
        outcomes=payload.get("outcomes", {}),
        durations=payload.get("durations", {}),
        coverage=payload.get("coverage", {}),
        import_time=payload.get("import_time", []),
        collect_errors=payload.get("collect_errors", []),
        timed_out=result.timed_out,
        output_tail=result.output[-3000:],
    )
