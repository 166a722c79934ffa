"""The result channel is out of the sandbox's reach: nothing of it is named in the workspace.

Project code that the agent's pdb session imported keeps running in that session while the agent calls
``run_tests`` in the same workspace. Here it starts an inotify watcher that swaps every new entry of the
project folder for a symlink to a host-only 0600 file, the move that once made the host chmod that file
0622 and send its first bytes back in the tamper message, when the channel was a FIFO made by name in
the workspace. A busy thread on the host stands for the other episodes of a trainer: it holds the GIL
between the host's system calls, which widens any window between two calls by name.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time

import pytest

from pdbgym.env import DebugEnv, EnvConfig
from pdbgym.tasks.model import load_task
from pdbgym.tasks.patches import apply_patch

from taskfixtures import make_task

SECRET = b"HOST-ONLY-6b1f0c secret bytes of a 0600 host file\n"
LOG = ".sandbox_home/watcher.log"  # inside a subfolder: writing it raises no event on the watched folder

WATCHER = '''
import ctypes, os, threading

def _watch(target):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init()
    libc.inotify_add_watch(fd, b".", 0x100 | 0x80)  # IN_CREATE | IN_MOVED_TO
    log = open(".sandbox_home/watcher.log", "a", buffering=1)
    log.write("started\\n")
    mine = 0
    while True:
        data = os.read(fd, 65536)
        offset = 0
        while offset < len(data):
            length = int.from_bytes(data[offset + 12:offset + 16], "little")
            name = data[offset + 16:offset + 16 + length].rstrip(b"\\0").decode()
            offset += 16 + length
            if name.startswith(".swap-"):
                continue
            log.write(name + "\\n")
            mine += 1
            temp = f".swap-{os.getpid()}-{mine}"
            try:
                os.symlink(target, temp)
                os.rename(temp, name)
            except OSError:
                pass

if not globals().get("_WATCHING"):
    _WATCHING = True
    threading.Thread(target=_watch, args=(TARGET,), daemon=True).start()
'''


def _busy(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(2000))


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("bwrap"), reason="the pdb session runs under bubblewrap here")
@pytest.mark.parametrize("backend", ["bwrap", "plain"])
def test_a_watcher_in_the_workspace_never_reaches_the_result_channel(tmp_path, backend):
    secret = tmp_path / "host" / "secret.txt"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    task = load_task(make_task(tmp_path / "task"))
    (task.repo / "calc" / "__init__.py").write_text(f"TARGET = {str(secret)!r}\n" + WATCHER)
    stop = threading.Event()
    busy = [threading.Thread(target=_busy, args=(stop,), daemon=True) for _ in range(2)]
    observations = []
    with DebugEnv(task, EnvConfig(sandbox=backend)) as env:
        env.reset()
        started = env.step({"tool": "pdb", "args": {"command": "!import calc"}}).observation
        log = env.ws / LOG
        _wait_for(lambda: log.is_file() and "started" in log.read_text(), f"the watcher to start: {started}")
        for thread in busy:
            thread.start()
        try:
            for _ in range(12):
                observations.append(env.step({"tool": "run_tests", "args": {"which": "all"}}).observation)
        finally:
            stop.set()
        # The watcher was alive all along: a new entry made now is seen and swapped.
        (env.ws / "probe.txt").write_text("x")
        _wait_for(lambda: (env.ws / "probe.txt").is_symlink(), f"the watcher to swap a new entry: {log.read_text()}")
        seen = log.read_text().split()
        # An honest fix still grades solved, with the watcher running.
        apply_patch(env.ws, task.patch)
        fixed = env.step({"tool": "run_tests", "args": {"which": "all"}}).observation
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert secret.read_bytes() == SECRET
    assert not [name for name in seen if name.startswith(".pdbgym-results")], seen
    for text in [*observations, fixed]:
        assert "HOST-ONLY" not in text and "TAMPERED" not in text, text[-1500:]
    assert all(text.startswith("1/2 passed") for text in observations), observations[0][-1500:]
    assert fixed.startswith("2/2 passed"), fixed[-1500:]


def _wait_for(condition, why: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {why}"
        time.sleep(0.05)


def test_the_channel_is_handed_over_not_named(tmp_path):
    """Nothing the run can reach names the channel: the variable holds a descriptor number."""
    from pdbgym.grading.testrun import run_tests
    from pdbgym.sandbox import get_sandbox

    task = load_task(make_task(tmp_path / "task"))
    (task.repo / "calc" / "__init__.py").write_text(
        "import os\nprint('CHANNEL-VAR', os.environ.get('PDBGYM_RESULT_CHANNEL'))\n")
    before = set(os.listdir(task.repo))
    run = run_tests(get_sandbox("plain"), task.repo, task, task.all_tests)
    assert set(os.listdir(task.repo)) - before <= {".sandbox_home"}
    assert "CHANNEL-VAR None" in run.output  # the plugin took the variable before project code ran
    assert run.outcomes == {"tests/test_ops.py::test_add": "passed", "tests/test_ops.py::test_sub": "failed"}
    assert not run.tampered
