"""A debuggee that floods output, forks or allocates without end, or opens sockets: each is contained,
the agent gets a clear observation, the episode goes on, and the host is not harmed."""

import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from pdbgym.env import Action, DebugEnv, zygotes
from pdbgym.sandbox.process import descendants
from pdbgym.tasks.model import load_task

HOSTILE_TESTS = '''
import os
import socket
import sys


def test_flood():
    for _ in range(400):
        sys.stdout.write("x" * 100_000 + "\\n")
    assert False


def test_fork_without_end():
    children = 0
    try:
        while children < 100_000:
            if os.fork() == 0:
                import time
                time.sleep(60)
                os._exit(0)
            children += 1
    finally:
        print("forked", children)
    assert False


def test_allocate_without_end():
    hoard = []
    while True:
        hoard.append(bytearray(64 * 1024 * 1024))


def test_network():
    with open("host_port.txt") as fh:
        port = int(fh.read())
    socket.create_connection(("127.0.0.1", port), timeout=3).close()


def test_writes_outside():
    with open("/tmp/../var/tmp/pdbgym-escape-marker", "w") as fh:
        fh.write("escaped")


def test_fine():
    assert 1 + 1 == 2
'''

HOSTILE_NAMES = ["test_flood", "test_fork_without_end", "test_allocate_without_end", "test_network",
                 "test_writes_outside"]


@pytest.fixture
def hostile_task(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[bool] = []
    threading.Thread(target=lambda: accepted.append(bool(server.accept())), daemon=True).start()
    root = tmp_path / "hostile"
    repo = root / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_hostile.py").write_text(HOSTILE_TESTS)
    (repo / "host_port.txt").write_text(str(server.getsockname()[1]))
    (repo / "app.py").write_text("VALUE = 1\n")
    (root / "task.json").write_text(json.dumps({
        "instance_id": "hostile",
        "FAIL_TO_PASS": [f"tests/test_hostile.py::{n}" for n in HOSTILE_NAMES],
        "PASS_TO_PASS": ["tests/test_hostile.py::test_fine"],
        "patch": "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-VALUE = 1\n+VALUE = 2\n",
        "test_timeout_s": 20,
    }))
    yield load_task(root)
    server.close()
    assert not accepted, "a sandboxed test reached a server on the host's loopback"


def _processes_left_by(workspace: str, already_running: set[int]) -> list[int]:
    """Our descendants, and any process anywhere whose environment names ``workspace`` (an escapee that
    left our tree still carries the sandbox's HOME). Other users of the machine do not count."""
    left = set(descendants(os.getpid())) - already_running  # e.g. a resource tracker of an earlier test
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if workspace.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                left.add(int(pid))
        except OSError:
            continue
    return sorted(left)


def _describe(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text().split("\n")[2]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} {status} {cmdline}"


needs_bwrap = pytest.mark.skipif(not shutil.which("bwrap"), reason="full isolation needs bubblewrap")


@pytest.mark.slow
@needs_bwrap
def test_hostile_tests_are_contained(hostile_task):
    marker = "/var/tmp/pdbgym-escape-marker"
    if os.path.exists(marker):
        os.unlink(marker)
    already_running = set(descendants(os.getpid()))
    with DebugEnv(hostile_task) as env:
        env.reset()
        workspace = str(env.ws)
        obs, done, _ = env.step(Action("run_tests", {"which": "all"}))
        assert not done
        assert "1/6 passed" in obs, obs[:2000]
        # The allocating test meets its own limit (MemoryError, a failed test) beside the fork test's
        # sleeping children, never the OOM killer (which would leave it incomplete and the rest missing).
        assert "  failed  tests/test_hostile.py::test_allocate_without_end" in obs, obs[:2000]
        assert len(obs) <= env.config.observation_max_chars + 200
        # The session survives it all and still answers.
        assert "7" in env.step(Action("pdb", {"command": "p 3 + 4"})).observation
        assert _processes_left_by(workspace, already_running), "the probe must see the live session's processes"
    assert not os.path.exists(marker), "a sandboxed test wrote outside its workspace"
    zygotes.close_all()  # the pool's idle fork servers are ours by design (run alone, this test counted them)
    # Killed processes take a moment to exit and be reaped; a real leak is still there after the grace.
    deadline = time.monotonic() + 5.0
    while (left := _processes_left_by(workspace, already_running)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"sandboxed processes outlived their run: {[_describe(pid) for pid in left]}"


@pytest.mark.slow
def test_flood_in_pdb_session_is_bounded(hostile_task):
    with DebugEnv(hostile_task) as env:
        env.reset()
        obs, done, _ = env.step(Action("pdb", {"command": "c"}))
        assert not done
        assert len(obs) <= env.config.observation_max_chars + 200
        assert "cut" in obs
