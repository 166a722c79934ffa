"""The pytest fork server in the plain backend (no namespaces, for machines without bubblewrap).

The plain backend isolates nothing, with or without a server, so what matters here is that the server does
what it does under bwrap for the episode (its pdb session and test runs fork from one warm interpreter;
grading starts a fresh one) and that its sweep, which under bwrap empties a whole PID namespace, the private
``/tmp`` and IPC, touches only the server's own descendants on a shared host.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pdbgym.env import Action, DebugEnv, EnvConfig, zygotes
from pdbgym.env.zygotes import server_argv
from pdbgym.grading import server
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason

FIX = {"path": "calc/ops.py", "start": 6, "end": 6, "new_text": "    return a - b\n"}


def _daemon(pid_file: Path) -> str:
    """A pdb command that leaves a daemon (double fork, its own session) writing its pid to ``pid_file``."""
    code = ("import os, time\\nif os.fork(): os._exit(0)\\n"
            f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\\nwhile True: time.sleep(0.05)")
    return (f"!import subprocess, sys; subprocess.Popen([sys.executable, '-c', \"{code}\"], "
            "start_new_session=True)")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(path: Path, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.02)
    raise AssertionError(f"{path} was not written")


def test_a_plain_episode_forks_its_session_and_runs_from_the_server_and_grades_afresh(tiny_task):
    zygotes.close_all()
    with DebugEnv(tiny_task, EnvConfig(sandbox="plain")) as env:
        env.reset()
        server_ = env._zygote
        assert server_ is not None and env.session.zygote is server_
        obs, _, _ = env.step(Action("pdb", {"command": "p 6 * 7"}))
        assert obs.strip().endswith("42"), obs
        env.step(Action("edit", FIX))  # the session restarts: another fork
        before = server_.jobs_run
        obs, _, _ = env.step(Action("run_tests", {"which": "failing"}))
        assert "1 passed" in obs and server_.jobs_run == before + 1, obs
        _, done, info = env.step(Action("submit"))
        assert done and info["final_test_passed"], env.result
        assert server_.jobs_run == before + 1, "grading forked from the episode's server"


def test_the_plain_sweep_ends_the_agents_daemon_and_leaves_the_hosts_processes_files_and_ipc(tiny_task, tmp_path):
    """A daemon the agent's session left is gone before grading reads the workspace; a process of the same
    user that is not the server's, a file in the host's /tmp and a System V segment are all still there."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    host_file = Path("/tmp") / f"pdbgym-plain-sweep-{os.getpid()}"
    host_file.write_text("the host's")
    segment = subprocess.run(["ipcmk", "-M", "4096"], capture_output=True, text=True)
    shm_id = segment.stdout.split()[-1] if segment.returncode == 0 else None
    try:
        with DebugEnv(tiny_task, EnvConfig(sandbox="plain")) as env:
            env.reset()
            assert env._zygote is not None
            env.step(Action("edit", FIX))
            env.step(Action("pdb", {"command": _daemon(tmp_path / "daemon.pid")}))
            daemon = _wait_for(tmp_path / "daemon.pid")
            assert _alive(daemon)
            _, done, info = env.step(Action("submit"))
            assert done and info["final_test_passed"], env.result
            assert not _alive(daemon), "the session's daemon outlived the sweep before grading"
        assert bystander.poll() is None, "the sweep killed a process that was not the server's"
        assert host_file.read_text() == "the host's"
        if shm_id is not None:
            listed = subprocess.run(["ipcs", "-m", "-i", shm_id], capture_output=True, text=True)
            assert listed.returncode == 0, f"the sweep removed the host's System V segment {shm_id}"
    finally:
        bystander.kill()
        bystander.wait()
        host_file.unlink(missing_ok=True)
        if shm_id is not None:
            subprocess.run(["ipcrm", "-m", shm_id], capture_output=True)


def test_the_next_plain_episode_gets_the_same_server_without_the_last_ones_processes(tiny_task, tmp_path):
    zygotes.close_all()
    with DebugEnv(tiny_task, EnvConfig(sandbox="plain")) as env:
        env.reset()
        first = env._zygote
        env.step(Action("pdb", {"command": _daemon(tmp_path / "daemon.pid")}))
        daemon = _wait_for(tmp_path / "daemon.pid")
    assert not _alive(daemon)
    with DebugEnv(tiny_task, EnvConfig(sandbox="plain")) as env:
        env.reset()
        assert env._zygote is first, "the swept server was not kept for the next episode"
        assert [p.name for p in first.folder.iterdir()] == [env.ws.name]  # the last workspace removed


def test_a_sweep_while_the_session_runs_kills_what_it_started(tiny_task, tmp_path):
    """The sweep itself, not only the end of a job (which also ends what the job left), kills a daemon."""
    with DebugEnv(tiny_task, EnvConfig(sandbox="plain")) as env:
        env.reset()
        env.step(Action("pdb", {"command": _daemon(tmp_path / "daemon.pid")}))
        daemon = _wait_for(tmp_path / "daemon.pid")
        session = env.session._process.pid
        account = env._zygote.sweep()
        assert account["ok"] and account["killed"] >= 2, account  # the session's process and its daemon
        assert not _alive(daemon) and not _alive(session)


def test_a_plain_server_stopped_with_a_job_running_leaves_no_process_behind(tiny_task, tmp_path):
    with DebugEnv(tiny_task, EnvConfig(sandbox="plain")) as env:
        env.reset()
        env.step(Action("pdb", {"command": _daemon(tmp_path / "daemon.pid")}))
        daemon = _wait_for(tmp_path / "daemon.pid")
        env._zygote.stop()
        deadline = time.monotonic() + 5
        while _alive(daemon) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(daemon), "a process of a stopped server's job escaped to the host"


def test_the_namespace_sweep_is_refused_outside_a_pid_namespace():
    """The host-wide sweep needs --pid-namespace, which the server refuses unless it is the second process of a
    namespace of its own: started on the host with it, the server exits before serving, killing nothing."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    host_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        started = subprocess.run([*server_argv(), str(server_end.fileno()), "--pid-namespace"],
                                 pass_fds=(server_end.fileno(),), capture_output=True, text=True, timeout=60)
        assert started.returncode != 0 and "not the second of a PID namespace" in started.stderr, started.stderr
        assert bystander.poll() is None
    finally:
        host_end.close()
        server_end.close()
        bystander.kill()
        bystander.wait()


@pytest.mark.skipif(bwrap_unavailable_reason() is not None, reason=str(bwrap_unavailable_reason()))
def test_a_bwrap_episode_never_gets_a_plain_server(tiny_task):
    """Servers wait by backend: a plain one, swept of its descendants only, must not serve a bwrap episode."""
    zygotes.close_all()
    with DebugEnv(tiny_task, EnvConfig(sandbox="plain")) as env:
        env.reset()
        plain = env._zygote
    with DebugEnv(tiny_task, EnvConfig(sandbox="bwrap")) as env:
        env.reset()
        assert env._zygote is not None and env._zygote is not plain


def test_the_plain_servers_kill_refuses_a_pid_that_is_not_its_descendant(monkeypatch):
    """The sweep reads pids and then signals them: in the host's PID namespace the pid may by then name
    another process. ``_kill`` checks, through a pidfd, that the process is below the server."""
    monkeypatch.setattr(server, "_plain", True)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    orphan_file = Path(f"/tmp/pdbgym-orphan-{os.getpid()}")
    # A grandchild whose parent exits is reparented away from this process: no longer below it.
    subprocess.run([sys.executable, "-c", "import os, subprocess, sys\n"
                    f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
                    f"open({str(orphan_file)!r}, 'w').write(str(p.pid))"], check=True)
    orphan = int(orphan_file.read_text())
    try:
        assert child.pid in server._other_pids() and orphan not in server._other_pids()
        assert server._is_below_me(child.pid) and not server._is_below_me(orphan)
        assert server._kill(orphan) is False and _alive(orphan)
        assert server._kill(child.pid) is True
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        child.kill()
        os.kill(orphan, signal.SIGKILL)
        orphan_file.unlink(missing_ok=True)


@pytest.mark.parametrize("sandbox", ["plain", "bwrap"])
def test_an_episode_on_the_server_reads_a_path_as_short_as_one_without_it(tiny_task, sandbox):
    """The workspace nests in the server's folder; its path shows in every breakpoint, listing and traceback
    the agent reads, so it must cost no more characters than a workspace of its own (it cost twice as many,
    and the scripted oracle overflowed a 4,096-token context on two built-in tasks)."""
    if sandbox == "bwrap" and bwrap_unavailable_reason():
        pytest.skip(bwrap_unavailable_reason())
    zygotes.close_all()
    paths = {}
    for server_on in (False, True):
        with DebugEnv(tiny_task, EnvConfig(sandbox=sandbox, zygote=server_on)) as env:
            env.reset()
            assert (env._zygote is not None) is server_on
            obs, _, _ = env.step(Action("pdb", {"command": "b calc/ops.py:6"}))
            assert str(env.ws) in obs, obs
            paths[server_on] = str(env.ws)
            if server_on:
                assert env.ws.parent == env._zygote.folder
    assert len(paths[True]) <= len(paths[False]) + 2, paths

