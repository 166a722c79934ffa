"""Run a task's tests inside the sandbox, hardened, and read each test's outcome from the result channel.

The run (``pdbgym.grading.launch``) starts an isolated interpreter with the project last on
``sys.path``, the task's pristine pytest configuration named explicitly, and the report plugin streaming
one JSON record per test phase through a pipe it inherits (``_ChannelReader``) as pytest reports it.
This side reads the stream while the run goes on and judges it (``judge``): the first record for a
test phase wins; a second one, a record for a test not asked for, a record after the end record, a
missing or inconsistent end record, an exit status that disagrees with the records, or a failed
self-check of the plugin marks the run tampered.
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pdbgym.errors import TaskFormatError
from pdbgym.fdwait import readable
from pdbgym.grading.guard import AGENT_LINES_ENV, AgentLines, encode_agent_lines
from pdbgym.grading.subject import GradedTask, pytest_options, test_command_problem
from pdbgym.grading.verdict import judge
from pdbgym.sandbox import Limits, Sandbox, beneath, sandbox_env
from pdbgym.sandbox.zygote import Zygote, ZygoteError

# The plugin reads the number of the channel's inherited descriptor from this variable
# (plugin.CHANNEL_ENV; not imported here, which would import pytest on the host).
CHANNEL_ENV = "PDBGYM_RESULT_CHANNEL"
KEY_ENV = "PDBGYM_RUN_KEY"  # plugin.KEY_ENV: the run's secret, which every record must carry
LAUNCHER = str(Path(__file__).with_name("launch.py"))
ZYGOTE_SERVER = str(Path(__file__).with_name("server.py"))  # the pytest fork server (pdbgym.grading.server)
MAX_CHANNEL_BYTES = 32 * 1024**2  # far above any honest run (about 150 bytes a phase record)
_CONFIG_FILES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini",
                 "setup.cfg")
MAX_CONFIG_BYTES = 4 * 1024**2  # far above any real pytest configuration file
_CONFIG_SECTIONS = {"pyproject.toml": ("[tool.pytest.ini_options]", "[tool.pytest]"), "tox.ini": ("[pytest]",),
                    "setup.cfg": ("[tool:pytest]",)}


@dataclass
class SuiteRun:
    """Outcomes of one pytest run. ``outcomes`` maps node id -> passed/failed/error/skipped/incomplete.

    ``tampered`` lists what the result channel showed of forgery; a tampered run passes nothing.
    ``refused`` says why the run's ending passes nothing (a signal, the wall clock, no end record, no
    closing line: ``pdbgym.grading.verdict.abnormal_ending``); its tests count as not passed.
    """

    outcomes: dict[str, str] = field(default_factory=dict)
    output: str = ""
    timed_out: bool = False
    duration_s: float = 0.0
    returncode: int | None = None
    tampered: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    foreign: dict[str, str] = field(default_factory=dict)  # project modules imported from outside the repo

    def passed(self, node: str) -> bool:
        """A test missing from the report (not collected, crashed run, timeout) counts as failed."""
        return not self.tampered and not self.refused and self.outcomes.get(node) == "passed"

    def all_passed(self, nodes: list[str]) -> bool:
        return all(self.passed(n) for n in nodes)

    def failing(self, nodes: list[str]) -> list[str]:
        return [n for n in nodes if not self.passed(n)]

    def summary(self, nodes: list[str]) -> str:
        lines = [f"{self.outcomes.get(n, 'missing (counted as failed)'):>8}  {n}" for n in nodes]
        passed = sum(self.passed(n) for n in nodes)
        head = f"{passed}/{len(nodes)} passed"
        if self.timed_out:
            head += " (the run hit its wall-clock limit)"
        if self.tampered:
            head += " (TAMPERED: the test results were forged, nothing counts as passed: " + \
                "; ".join(self.tampered[:3]) + ")"
        elif self.refused:
            head += " (the run ended abnormally, nothing counts as passed: " + "; ".join(self.refused[:3]) + ")"
        return head + "\n" + "\n".join(lines)


def failure_reason(run: SuiteRun, failing: list[str], tail_chars: int = 1500) -> str:
    """Why ``failing`` did not pass: each one's outcome, any forgery seen, a timeout, the output's tail."""
    outcomes = ", ".join(f"{n}: {run.outcomes.get(n, 'missing (never reported)')}" for n in failing)
    parts = [outcomes]
    if run.tampered:
        parts.append("the result channel showed forgery: " + "; ".join(run.tampered[:3]))
    if run.refused:
        parts.append("the run ended abnormally, so nothing it reported counts: " + "; ".join(run.refused[:3]))
    if run.timed_out:
        parts.append("the run hit its wall-clock limit")
    elif run.returncode is not None and run.returncode < 0:
        parts.append(f"pytest was killed by signal {-run.returncode}")
    tail = run.output.strip()[-tail_chars:]
    parts.append("end of pytest's output:\n" + (tail or "(no output)"))
    return "\n".join(parts)


def pytest_extra_args(task: GradedTask) -> list[str]:
    """The task author's pytest options from ``test_command`` ('python -m pytest [options]')."""
    options = pytest_options(task.test_command)
    if options is None:  # loading refuses such a task; a Task built in code can still hold one
        raise TaskFormatError(str(test_command_problem(task.instance_id, task.test_command)))
    return options


def pristine_config(root: Path, nodes: list[str]) -> Path | None:
    """The pytest configuration file pytest would pick for ``nodes``, searched from their common folder up
    to ``root`` only (never above it), in pytest's order of preference."""
    folders = [Path(n.split("::", 1)[0]).parent for n in nodes] or [Path(".")]
    common = Path(os.path.commonpath([str(f) for f in folders]) or ".")
    for folder in [common, *common.parents]:
        for name in _CONFIG_FILES:
            candidate = root / folder / name
            if candidate.is_symlink():
                continue
            try:  # read beneath the root from folder descriptors: the agent's run reads its own workspace,
                # where a sandboxed process may swap the file for a link out or a FIFO meanwhile
                data, _ = beneath.read_bytes(root, (folder / name).as_posix(), MAX_CONFIG_BYTES)
            except OSError:
                continue
            sections = _CONFIG_SECTIONS.get(name)
            if sections is None or any(s in data.decode(errors="replace") for s in sections):
                return candidate
    return None


def launch_argv(task: GradedTask, root: Path, nodes: list[str], python: str = sys.executable) -> list[str]:
    """The hardened pytest command for ``nodes`` in ``root``: isolated interpreter, pristine config."""
    config = pristine_config(root, nodes)
    return [
        python, "-I", "-B", LAUNCHER, str(root),
        *pytest_extra_args(task),
        "-c", str(config) if config is not None else os.devnull,
        f"--rootdir={root}", f"--confcutdir={root}",
        "--import-mode=append",
        "-p", "no:cacheprovider",
        f"--timeout={task.test_timeout_s:g}",
        # No capture: test output goes straight to the sandbox's bounded pipe, never to a capture file
        # that the file-size limit would cut (a test printing 200 MB must not fail a correct fix).
        "-s",
        "-q",
        "--color=no",  # after the config's addopts, which may ask for colours: the closing line stays plain
        *nodes,
    ]


class _ChannelReader:
    """Reads the pipe the plugin writes, on a thread, while the sandboxed run goes on.

    An anonymous pipe: nothing of it has a name, so no process of the sandbox (the run itself, or the
    agent's pdb session working in the same folder) can swap it for a link to a host file between two
    calls by name. The run inherits ``write_fd`` (handed to ``Sandbox.run``, which closes this process's
    copy once the run started): EOF comes when no process of the run holds it any more.
    """

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()  # both close-on-exec: no other child inherits them
        self.inode = os.fstat(self.read_fd).st_ino  # the plugin names it in its start and end records
        os.set_blocking(self.read_fd, False)
        self.data = bytearray()
        self.overflow = False
        self._ended = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while not self._ended:
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                self._ended = True  # every write end is closed; none can be opened again
                return
            if len(self.data) + len(chunk) > MAX_CHANNEL_BYTES:
                self.overflow = True
                continue
            self.data += chunk

    def _loop(self) -> None:
        while not self._stop.is_set() and not self._ended:
            if readable([self.read_fd], 0.05):
                self._drain()

    def finish(self) -> bytes:
        self._stop.set()
        self._thread.join()
        self._drain()
        os.close(self.read_fd)
        return bytes(self.data)


def run_tests(
    sandbox: Sandbox,
    root: Path,
    task: GradedTask,
    nodes: list[str],
    *,
    limits: Limits | None = None,
    readonly_paths: Sequence[str | Path] = (),
    agent_lines: AgentLines | None = None,
    zygote: Zygote | None = None,
) -> SuiteRun:
    """Run ``nodes`` in ``root`` under ``sandbox``; never raises for test failures or timeouts.

    ``readonly_paths`` (relative to ``root``, or absolute inside it) are bound read-only for the run
    (``Sandbox.run``). ``agent_lines`` are the lines an agent wrote, by repo-relative file: the run's
    guard (``pdbgym.grading.guard``) refuses interpreter machinery used by that code; None (task
    validation, synthesis) means the run holds no agent code. ``zygote``: a pytest fork server whose
    sandbox holds ``root`` (its workspace; never with ``readonly_paths``, which it cannot bind per run);
    the run is one of its forked children, the same launcher steps without the
    interpreter's start. Where the server cannot run it, or never reports how it ended, the run is made
    afresh as without one."""
    root = Path(root).resolve()
    argv = launch_argv(task, root, nodes)
    wall = min(600.0, 30.0 + task.test_timeout_s * max(1, len(nodes)))
    limits = limits or Limits(wall_time_s=wall)
    env = sandbox_env(root)
    if any(Path(os.path.abspath(Path(root, p))) == root for p in readonly_paths):
        env["HOME"] = "/tmp"  # the tree's own HOME is read-only with it; the sandbox's /tmp is private
    if agent_lines is not None:
        env[AGENT_LINES_ENV] = encode_agent_lines(agent_lines)
    env[KEY_ENV] = key = secrets.token_hex(16)
    started = time.perf_counter()
    result, stream = None, b""
    if zygote is not None and root.is_relative_to(zygote.folder) and not readonly_paths:
        channel = _ChannelReader()
        try:
            result = zygote.run_test(root, argv[argv.index(LAUNCHER) + 2:], dict(env), channel.write_fd, limits)
        except ZygoteError:
            result = None  # what the run wrote so far is dropped with its channel
        finally:
            stream = channel.finish()
    if result is None:
        channel = _ChannelReader()
        try:
            env[CHANNEL_ENV] = str(channel.write_fd)
            result = sandbox.run(argv, root, limits, env=env, readonly_paths=readonly_paths,
                                 pass_fds=(channel.write_fd,))
        finally:
            stream = channel.finish()
    verdict = judge(stream, nodes, result.returncode, result.timed_out, result.output, pipe=channel.inode, key=key)
    if channel.overflow:
        verdict.tampered.append(f"the result channel carried over {MAX_CHANNEL_BYTES} bytes")
    return SuiteRun(
        outcomes=verdict.outcomes,
        output=result.output,
        timed_out=result.timed_out,
        duration_s=time.perf_counter() - started,
        returncode=result.returncode,
        tampered=verdict.tampered,
        refused=verdict.refused,
        foreign=verdict.foreign,
    )

