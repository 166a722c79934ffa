"""The file tools against a folder that a sandboxed process flips between the workspace and the host.

An agent can start a background process from pdb (``!subprocess.Popen(..., start_new_session=True)``)
that swaps a workspace folder with a symlink to a host folder with ``renameat2(RENAME_EXCHANGE)`` in a
tight loop. A tool that checks a path once and then opens it again by name follows whichever the
name is at that instant. Here the swapping process runs inside a real sandbox (bubblewrap where it
works, else the plain backend, where it is a host process under the same limits: the race is the
same) while the real ``view`` and ``edit`` functions are called many times from the host side, for a
few seconds. The host folder holds a 0600 secret and a file named like the edited one: the secret
must never appear in what the tools return, the host file must keep its bytes, and no temporary or
other file may appear in the host folder.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path

import pytest

from pdbgym.env import files
from pdbgym.env.tools import ActionError
from pdbgym.sandbox import Limits, Workspace, get_sandbox

RACE_SECONDS = 3.0
FLIPPER = r'''
import ctypes, os, platform, sys
libc = ctypes.CDLL(None, use_errno=True)
number = {"x86_64": 316, "aarch64": 276}[platform.machine()]  # SYS_renameat2
AT_FDCWD, RENAME_EXCHANGE = -100, 2
os.symlink(sys.argv[1], "pkg_swap")  # the link's text names the host folder; it need not exist here
print("flipping", flush=True)
real, link = ctypes.c_char_p(b"pkg"), ctypes.c_char_p(b"pkg_swap")
while True:
    if libc.syscall(ctypes.c_long(number), ctypes.c_long(AT_FDCWD), real, ctypes.c_long(AT_FDCWD), link,
                    ctypes.c_long(RENAME_EXCHANGE)) != 0:
        print("renameat2 failed", ctypes.get_errno(), flush=True)
        break
'''

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="renameat2 is Linux only")


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mode, p.stat().st_mtime_ns) for p in folder.iterdir()}


@pytest.fixture
def raced(tmp_path):
    """(workspace, host folder, secret): a sandboxed process swaps ``pkg`` with a link to the host folder."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "mod.py").write_text("".join(f"value_{n} = {n}\n" for n in range(5)))
    (repo / "pkg" / "notes.txt").write_text("workspace notes\n")
    host = tmp_path / "host"
    host.mkdir()
    secret = f"SECRET-{secrets.token_hex(8)}"
    (host / "secret.txt").write_text(secret + "\n")
    (host / "secret.txt").chmod(0o600)
    (host / "mod.py").write_text("HOST TARGET, must never change\n")
    (host / "notes.txt").write_text(f"host notes {secret}\n")
    workspace = Workspace.create(repo, tmp_path / "workspaces")
    (workspace.path / "flipper.py").write_text(FLIPPER)
    sandbox = get_sandbox("auto")
    process = sandbox.spawn_pty([sys.executable, "-I", "flipper.py", str(host)], workspace.path,
                                Limits(wall_time_s=60))
    try:
        seen = b""
        deadline = time.monotonic() + 30
        while b"flipping" not in seen and time.monotonic() < deadline:
            seen += process.read(0.5) or b""
        assert b"flipping" in seen, f"the swapping process did not start: {seen!r}"
        kinds: set[bool] = set()
        deadline = time.monotonic() + 10
        while kinds != {True, False} and time.monotonic() < deadline:  # a loaded machine schedules it late
            kinds.add(os.path.islink(workspace.path / "pkg"))
        assert kinds == {True, False}, "the folder is not being swapped"
        yield workspace.path, host, secret
        assert process.alive, f"the swapping process stopped: {process.read(0)!r}"
    finally:
        process.close()
        workspace.cleanup()


def _attempts(workspace: Path):
    """Each tool call an agent could make on the swapped folder, in turn."""
    while True:
        yield lambda: files.view(workspace, "pkg/secret.txt")
        yield lambda: files.view(workspace, "pkg/notes.txt")
        yield lambda: files.view(workspace, "pkg/mod.py", 1, 3)
        yield lambda: files.view(workspace, "pkg")
        yield lambda: files.edit_lines(workspace, "pkg/mod.py", 1, 1, "value_0 = 'agent text'\n")
        yield lambda: files.edit_string(workspace, "pkg/notes.txt", "notes", "notes")


def test_swapping_a_folder_for_a_host_link_reaches_no_host_file(raced):
    workspace, host, secret = raced
    before = _snapshot(host)
    observations: list[str] = []
    strays: set[str] = set()
    calls = 0
    deadline = time.monotonic() + RACE_SECONDS
    for attempt in _attempts(workspace):
        if time.monotonic() > deadline:
            break
        calls += 1
        try:
            result = attempt()
            observations.append(result if isinstance(result, str) else repr(result))
        except (ActionError, OSError) as exc:  # the environment shows either as "Error: ..."
            observations.append(str(exc))
        if calls % 20 == 0:
            strays |= {p.name for p in host.iterdir()} - set(before)
    leaked = [text for text in observations if secret in text or "HOST TARGET" in text]
    changed = sorted(name for name, state in _snapshot(host).items() if before.get(name) != state)
    problems = [f"{len(leaked)} of {calls} tool calls returned host content, e.g. {leaked[0]!r}"] if leaked else []
    problems += [f"{len(strays)} files appeared in the host folder: {sorted(strays)[:3]}"] if strays else []
    problems += [f"host files changed: {changed[-3:]}"] if changed else []
    assert not problems, "; ".join(problems)
    assert calls > 200, f"only {calls} tool calls in {RACE_SECONDS} s: the race was hardly tried"
    # The honest side still works: the workspace file took the agent's edit whenever the folder was real.
    assert any("agent text" in text for text in observations)


FIFO_FLIPPER = r'''
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
number = {"x86_64": 316, "aarch64": 276}[platform.machine()]
os.mkfifo("swap")
print("flipping", flush=True)
real, fifo = ctypes.c_char_p(b"pyproject.toml"), ctypes.c_char_p(b"swap")
while libc.syscall(ctypes.c_long(number), ctypes.c_long(-100), real, ctypes.c_long(-100), fifo,
                   ctypes.c_long(2)) == 0:
    pass
'''


def test_a_config_file_swapped_for_a_fifo_does_not_stall_the_agents_test_run(tmp_path):
    """The agent's ``run_tests`` picks the pytest configuration from its workspace on the host. A sandboxed
    process swaps ``pyproject.toml`` with a FIFO in a loop: a read by name that meets the FIFO would wait
    for a writer that never comes, and the episode with it."""
    from pdbgym.grading.testrun import pristine_config

    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-q'\n")
    workspace = Workspace.create(repo, tmp_path / "workspaces")
    (workspace.path / "flipper.py").write_text(FIFO_FLIPPER)
    process = get_sandbox("auto").spawn_pty([sys.executable, "-I", "flipper.py"], workspace.path,
                                            Limits(wall_time_s=60))
    picked: list[object] = []

    def pick_many() -> None:
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline:
            picked.append(pristine_config(workspace.path, ["tests/test_x.py::test_x"]))

    try:
        seen = b""
        while b"flipping" not in seen:
            seen += process.read(5.0) or b""
        import threading

        picker = threading.Thread(target=pick_many, daemon=True)
        picker.start()
        picker.join(RACE_SECONDS + 5)
        stalled = picker.is_alive()
    finally:
        process.close()
        for name in ("pyproject.toml", "swap"):  # let a read stuck on the FIFO go
            try:
                os.close(os.open(workspace.path / name, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        workspace.cleanup()
    assert not stalled, "reading the configuration waited on a FIFO"
    assert len(picked) > 100
