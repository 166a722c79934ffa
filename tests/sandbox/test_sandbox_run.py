"""Real confinement checks: real bwrap, real processes, a real TCP server on loopback."""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from pathlib import Path

import pytest

from pdbgym.errors import SandboxError
from pdbgym.sandbox import Limits, Workspace, get_sandbox, sandbox_env
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason, python_roots
from pdbgym.sandbox.cgroup import pids_cgroup_root

needs_bwrap = pytest.mark.skipif(bwrap_unavailable_reason() is not None, reason=str(bwrap_unavailable_reason()))
PY = sys.executable


@pytest.fixture
def workspace(tmp_path: Path):
    source = tmp_path / "project"
    source.mkdir()
    (source / "hello.py").write_text("print('hello from the workspace')\n")
    with Workspace.create(source, parent=tmp_path / "workspaces") as ws:
        yield ws.path


@pytest.fixture
def loopback_server():
    """A real TCP server on the host's loopback, answering b'pong' to every connection."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"pong")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    server.close()


def _leftover_processes(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


CONNECT = "import socket,sys; s=socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3); print(s.recv(4))"


def test_plain_backend_reaches_loopback_and_warns_once_a_process(workspace, loopback_server, caplog, monkeypatch):
    import pdbgym.sandbox

    monkeypatch.setattr(pdbgym.sandbox, "_WARNED", set())
    with caplog.at_level(logging.WARNING, logger="pdbgym.sandbox"):
        sandbox = get_sandbox("plain")
        get_sandbox("plain")  # a campaign asks every episode: said once, not hundreds of times
    assert caplog.text.count("isolation is reduced") == 1
    assert not sandbox.isolated
    result = sandbox.run([PY, "-c", CONNECT, str(loopback_server)], workspace)
    assert result.returncode == 0, result.output
    assert "b'pong'" in result.output


@needs_bwrap
def test_bwrap_blocks_network(workspace, loopback_server):
    result = get_sandbox("bwrap").run([PY, "-c", CONNECT, str(loopback_server)], workspace)
    assert result.returncode != 0
    assert "pong" not in result.output
    assert "Error" in result.output  # a connection error, raised inside the sandbox


@needs_bwrap
def test_bwrap_writes_only_inside_workspace(workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    script = (
        "import pathlib, sys\n"
        "for target in sys.argv[1:]:\n"
        "    try:\n"
        "        pathlib.Path(target).write_text('x'); print('wrote', target)\n"
        "    except OSError as exc:\n"
        "        print('refused', target, exc.strerror)\n"
    )
    private_tmp = f"/tmp/pdbgym-private-{os.getpid()}"
    host_dir = Path(sys.prefix) / f"pdbgym-must-not-exist-{os.getpid()}"  # outside /tmp, on the host
    result = get_sandbox("bwrap").run(
        [PY, "-c", script, str(outside / "f"), "/etc/pdbgym-f", str(host_dir), str(workspace / "inside.txt"),
         private_tmp],
        workspace,
    )
    assert f"refused {outside / 'f'}" in result.output  # host /tmp is hidden behind the private one
    assert f"refused {host_dir}" in result.output  # Read-only file system (or no permission, non-root)
    assert not host_dir.exists()
    assert "refused /etc/pdbgym-f" in result.output
    assert f"wrote {workspace / 'inside.txt'}" in result.output
    assert f"wrote {private_tmp}" in result.output
    assert not (outside / "f").exists() and not Path("/etc/pdbgym-f").exists()
    assert (workspace / "inside.txt").read_text() == "x"
    assert not Path(private_tmp).exists()  # the sandbox's /tmp is its own


FORK_BOMB = """
import os, time
children = 0
while True:
    try:
        pid = os.fork()
    except OSError as exc:
        print('fork refused after', children, 'children:', exc.strerror, flush=True)
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    children += 1
"""


@pytest.mark.parametrize("kind", [pytest.param("bwrap", marks=needs_bwrap), "plain"])
def test_fork_bomb_is_bounded_and_cleaned_up(workspace, kind):
    if pids_cgroup_root() is None and os.getuid() == 0:
        pytest.skip("root without a writable pids cgroup: RLIMIT_NPROC is not enforced for root")
    result = get_sandbox(kind).run([PY, "-c", FORK_BOMB, "fork-bomb-marker"], workspace,
                                   Limits(max_processes=16, wall_time_s=20))
    assert "fork refused after" in result.output, result.output
    children = int(result.output.split("fork refused after")[1].split()[0])
    assert children < 16
    assert not _leftover_processes("fork-bomb-marker")


@needs_bwrap
def test_memory_hog_is_stopped(workspace):
    result = get_sandbox("bwrap").run([PY, "-c", "block = bytearray(1024**3)"], workspace,
                                      Limits(memory_bytes=256 * 1024**2))
    assert result.returncode != 0
    assert "MemoryError" in result.output


CROWDED_HOG = """
import os, time
children = []
for _ in range(50):  # siblings holding memory (4 MiB each, plus their copied pages) while one grows
    pid = os.fork()
    if pid == 0:
        held = bytearray(4 * 1024**2)
        time.sleep(60)
        os._exit(0)
    children.append(pid)
time.sleep(1)
hoard = []
try:
    while True:
        hoard.append(bytearray(32 * 1024**2))
except MemoryError:
    print("MemoryError after", 32 * len(hoard), "MiB")
"""


@pytest.mark.parametrize("kind", [pytest.param("bwrap", marks=needs_bwrap), "plain"])
def test_a_process_at_its_own_limit_gets_memory_error_beside_many_others(workspace, kind):
    """The tree's memory limit leaves headroom above one process's: a process that reaches its own
    limit while 50 siblings hold memory gets MemoryError and goes on, never the OOM killer (which a tree
    limit equal to the process limit gave: the hostile debuggee's allocating test died instead)."""
    limits = Limits(memory_bytes=512 * 1024**2, wall_time_s=60)
    assert limits.tree_memory_limit == 1024**3
    result = get_sandbox(kind).run([PY, "-c", CROWDED_HOG], workspace, limits)
    assert result.returncode == 0 and "MemoryError after" in result.output, (result.returncode, result.output)


@needs_bwrap
def test_output_flood_is_bounded_with_a_note(workspace):
    flood = "import sys\nchunk = b'y' * 65536\nfor _ in range(3200):\n    sys.stdout.buffer.write(chunk)\n"
    limits = Limits(output_limit_bytes=4000)
    result = get_sandbox("bwrap").run([PY, "-c", flood], workspace, limits)
    assert result.returncode == 0
    assert result.bytes_total == 3200 * 65536
    assert result.truncated
    assert f"[... {3200 * 65536 - 4000} bytes cut ...]" in result.output
    assert len(result.output) < 4100


@pytest.mark.parametrize("kind", [pytest.param("bwrap", marks=needs_bwrap), "plain"])
def test_timeout_kills_the_whole_tree(workspace, kind):
    marker = f"{kind}-timeout-marker"
    script = f"sleep 300 & sleep 300 & (setsid sleep 300 &) ; echo started; exec sleep 301 # {marker}"
    result = get_sandbox(kind).run(["sh", "-c", script], workspace, Limits(wall_time_s=1.0))
    assert result.timed_out
    assert "started" in result.output
    if kind == "plain" and pids_cgroup_root() is None:
        pytest.skip("without a cgroup the plain backend cannot find a setsid'd grandchild")
    assert not _leftover_processes(marker)
    assert not [pid for pid in _leftover_processes("sleep 300")]


def test_background_process_does_not_hold_a_finished_command(workspace):
    # A run that waited for the background sleep would end at its wall time instead, as timed out.
    result = get_sandbox("plain").run(["sh", "-c", "sleep 200 & echo done"], workspace, Limits(wall_time_s=60.0))
    assert result.returncode == 0 and not result.timed_out
    assert "done" in result.output
    assert not _leftover_processes("sleep 200")


def test_stdin_and_env_are_passed_and_proxies_are_not(workspace, monkeypatch):
    monkeypatch.setenv("https_proxy", "http://proxy.invalid:3128")
    monkeypatch.setenv("PYTHONBREAKPOINT", "pdbpp.set_trace")
    script = "import os, sys; print(sys.stdin.read().upper(), sorted(k for k in os.environ if 'PROXY' in k.upper() or k == 'PYTHONBREAKPOINT'), os.environ['HOME'])"
    result = get_sandbox("plain").run([PY, "-c", script], workspace, stdin="shout\n")
    assert "SHOUT" in result.output
    assert "[]" in result.output
    assert str(workspace) in result.output
    assert sandbox_env(workspace, {"X": "1"})["X"] == "1"


def test_missing_program_and_bad_arguments(workspace):
    sandbox = get_sandbox("plain")
    result = sandbox.run(["definitely-not-a-program-xyz"], workspace)
    assert result.returncode == 127 and "cannot execute" in result.output
    with pytest.raises(SandboxError, match="non-empty list"):
        sandbox.run("python -V", workspace)  # type: ignore[arg-type]
    with pytest.raises(SandboxError, match="not a folder"):
        sandbox.run(["true"], workspace / "missing")
    with pytest.raises(SandboxError, match="unknown sandbox kind"):
        get_sandbox("docker-ish")
    with pytest.raises(SandboxError, match="must be positive"):
        Limits(wall_time_s=0)


def test_command_that_closes_its_output_still_runs_to_the_end(workspace):
    result = get_sandbox("plain").run(["sh", "-c", "echo bye; exec >&- 2>&-; sleep 0.3; touch done.txt"], workspace)
    assert result.returncode == 0 and not result.timed_out
    assert result.output == "bye\n"
    assert (workspace / "done.txt").exists()


def test_auto_falls_back_to_plain_with_a_warning_when_bwrap_cannot_run(monkeypatch, caplog):
    import pdbgym.sandbox

    monkeypatch.setattr(pdbgym.sandbox, "_WARNED", set())
    monkeypatch.setenv("PDBGYM_BWRAP", "/nonexistent/bwrap")
    bwrap_unavailable_reason.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="pdbgym.sandbox"):
            sandbox = get_sandbox("auto")
        assert sandbox.name == "plain"
        assert "falling back from bwrap" in caplog.text and "isolation is reduced" in caplog.text
        with pytest.raises(SandboxError, match="bwrap sandbox is not available"):
            get_sandbox("bwrap")
    finally:
        monkeypatch.undo()
        bwrap_unavailable_reason.cache_clear()


@needs_bwrap
def test_python_installed_under_tmp_still_runs_in_bwrap(workspace, tmp_path, monkeypatch):
    # CI may clone (and build its virtualenv) under /tmp, which the sandbox replaces with a private
    # tmpfs: the interpreter's prefix is bound back wherever it is, and nothing else of the caller's /tmp.
    prefix = tmp_path / "venv"
    (prefix / "site").mkdir(parents=True)
    (prefix / "site" / "probe_mod.py").write_text("VALUE = 41 + 1\n")
    (tmp_path / "beside.txt").write_text("not the interpreter's\n")
    monkeypatch.setattr(sys, "prefix", str(prefix))
    python_roots.cache_clear()
    try:
        assert str(prefix) in python_roots()
        env = sandbox_env(workspace, {"PYTHONPATH": str(prefix / "site")})
        script = "import os, sys, probe_mod; print(probe_mod.VALUE, os.path.exists(sys.argv[1]))"
        result = get_sandbox("bwrap").run([sys.executable, "-c", script, str(tmp_path / "beside.txt")],
                                          workspace, Limits(wall_time_s=30), env=env)
    finally:
        monkeypatch.undo()
        python_roots.cache_clear()
    assert result.ok and result.output.strip() == "42 False", result.output
