"""The host side of the pytest fork server (``pdbgym.sandbox.zygote``): its life, its jobs' bounds, and what
happens when a job turns on the server. Real bubblewrap, real server (``pdbgym.grading.server``)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pdbgym.env.zygotes import server_argv
from pdbgym.grading.testrun import LAUNCHER, _ChannelReader, launch_argv, run_tests
from pdbgym.sandbox import Limits, Workspace, get_sandbox, sandbox_env
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason
from pdbgym.sandbox.process import kill_commands_in
from pdbgym.sandbox.zygote import Zygote, ZygoteError

needs_bwrap = pytest.mark.skipif(bwrap_unavailable_reason() is not None, reason=str(bwrap_unavailable_reason()))


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    server = Zygote(get_sandbox("bwrap"), server_argv())
    server.wait_ready()
    yield server
    server.close()


def _run(zygote: Zygote, task, ws: Path, wall_time_s: float = 30.0):
    argv = launch_argv(task, ws, task.all_tests)
    channel = _ChannelReader()
    try:
        return zygote.run_test(ws, argv[argv.index(LAUNCHER) + 2:], sandbox_env(ws), channel.write_fd,
                               Limits(wall_time_s=wall_time_s))
    finally:
        channel.finish()


def _append(ws: Path, code: str) -> None:
    init = ws / "calc" / "__init__.py"
    init.write_text(init.read_text() + code)


def test_an_isolating_sandbox_without_read_only_binds_holds_no_server():
    class Isolating(type(get_sandbox("plain"))):  # a backend that isolates but cannot bind read-only
        name, isolated = "isolating", True

    with pytest.raises(ZygoteError, match="needs read-only binds or no isolation"):
        Zygote(Isolating(), server_argv())


@needs_bwrap
def test_a_server_started_from_a_thread_that_ends_keeps_running(tiny_task):
    """bwrap's --die-with-parent fires when the *thread* that started it ends: episodes step through worker
    threads, so every server is started from one long-lived thread instead."""
    made: list[Zygote] = []
    starter = threading.Thread(target=lambda: made.append(Zygote(get_sandbox("bwrap"), server_argv())))
    starter.start()
    starter.join()
    zygote = made[0]
    try:
        zygote.wait_ready()
        time.sleep(0.5)
        assert zygote.alive
        with Workspace.create(tiny_task.repo, zygote.folder) as ws:
            assert _run(zygote, tiny_task, ws.path).returncode == 1  # sub() still adds: a test fails
    finally:
        zygote.close()


@needs_bwrap
def test_a_run_past_its_wall_time_is_killed_and_the_server_goes_on(zygote, tiny_task):
    with Workspace.create(tiny_task.repo, zygote.folder) as ws:
        _append(ws.path, "import time\ntime.sleep(60)\n")
        result = _run(zygote, tiny_task, ws.path, wall_time_s=1.5)
        assert result.timed_out and result.returncode == -signal.SIGKILL
    with Workspace.create(tiny_task.repo, zygote.folder) as ws:
        assert _run(zygote, tiny_task, ws.path).returncode == 1
    assert zygote.jobs_run == 2


@needs_bwrap
def test_a_run_that_stops_its_server_is_made_afresh_and_the_server_is_not_used_again(zygote, tiny_task):
    """SIGSTOP to the server (same uid) leaves the run's status unreported: the result is not used, the
    server is stopped for good, and the run is made by a fresh interpreter."""
    with Workspace.create(tiny_task.repo, zygote.folder) as ws:
        _append(ws.path, "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n")
        run = run_tests(zygote.sandbox, ws.path, tiny_task, tiny_task.all_tests, zygote=zygote)
    assert run.outcomes == {"tests/test_ops.py::test_add": "passed", "tests/test_ops.py::test_sub": "failed"}
    assert not zygote.alive
    with pytest.raises(ZygoteError, match="not running"):  # refused at once: no request reaches the stopped server
        zygote.sweep()


@needs_bwrap
def test_the_workspaces_disk_watcher_ends_the_whole_server(zygote, tiny_task):
    """kill_commands_in(workspace), what the disk cap calls, reaches the server that holds the workspace."""
    with Workspace.create(tiny_task.repo, zygote.folder) as ws:
        zygote.serve_workspace(ws.path)
        assert kill_commands_in(ws.path) == 1
        deadline = time.monotonic() + 5
        while zygote.alive and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not zygote.alive
        with pytest.raises(ZygoteError):
            _run(zygote, tiny_task, ws.path)


@needs_bwrap
def test_the_servers_folder_is_writable_inside(zygote, tiny_task):
    with Workspace.create(tiny_task.repo, zygote.folder) as ws:
        _append(ws.path, "import os\n"
                         f"open({str(ws.path / 'made.txt')!r}, 'w').write('x')\n")
        _run(zygote, tiny_task, ws.path)
        assert (ws.path / "made.txt").is_file()


@needs_bwrap
def test_closing_ends_every_process_and_removes_the_folder(tiny_task):
    zygote = Zygote(get_sandbox("bwrap"), server_argv())
    zygote.wait_ready()
    with Workspace.create(tiny_task.repo, zygote.folder) as ws:
        pty = zygote.spawn_pty(["--spare", "-s", "tests/test_ops.py::test_sub"], ws.path, sandbox_env(ws.path))
        pid = pty.pid
        zygote.close()
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
        os.close(pty.master_fd)
    assert not zygote.folder.exists() and not zygote.alive


@needs_bwrap
def test_a_malformed_request_is_refused_and_the_server_goes_on(zygote, tiny_task):
    with pytest.raises(ZygoteError, match="not a request"):
        zygote._start({"op": "bogus"}, [])
    with Workspace.create(tiny_task.repo, zygote.folder) as ws:
        assert _run(zygote, tiny_task, ws.path).returncode == 1
