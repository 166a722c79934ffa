"""Escape attempts against the sandbox, each reproducing an attack: real bwrap, real sockets, real files.

Each test runs hostile code inside the sandbox and checks on the host that nothing escaped. The host
side plants what the attack is after (a 0600 secret, a listening unix socket, a host folder) outside the
workspace and removes it afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pdbgym.sandbox import Limits, Workspace, get_sandbox
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason
from pdbgym.sandbox.cgroup import memory_cgroup_available

needs_bwrap = pytest.mark.skipif(bwrap_unavailable_reason() is not None, reason=str(bwrap_unavailable_reason()))
PY = sys.executable
GiB = 1024**3


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    source = tmp_path / "project"
    source.mkdir()
    (source / "mod.py").write_text("VALUE = 1\n")
    with Workspace.create(source, parent=tmp_path / "workspaces") as ws:
        yield ws.path


@pytest.fixture
def host_folder() -> Iterator[Path]:
    """A root-owned host folder outside /tmp and outside the workspace (removed afterwards)."""
    folder = Path(tempfile.mkdtemp(prefix="pdbgym-escape-", dir="/var/tmp"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _inside(script: str, workspace: Path, *args: str, kind: str = "bwrap", limits: Limits = Limits()) -> dict:
    """Run ``script`` in the sandbox; it prints one JSON object as its last line, returned here."""
    result = get_sandbox(kind).run([PY, "-c", textwrap.dedent(script), *args], workspace, limits)
    lines = result.output.strip().splitlines()
    assert lines, f"no output from the sandboxed script (exit {result.returncode})"
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        raise AssertionError(f"unexpected output (exit {result.returncode}): {result.output}") from None


TRY_OPEN = """
import json, os, sys
mode = {"r": os.O_RDONLY, "w": os.O_WRONLY}[sys.argv[1]]
found = {}
for path in sys.argv[2:]:
    try:
        fd = os.open(path, mode)  # opened, never written: a successful open is the escape
        os.close(fd)
        found[path] = "opened"
    except OSError as exc:
        found[path] = exc.strerror
print(json.dumps(found))
"""


@needs_bwrap
def test_proc_sys_and_sysrq_cannot_be_opened_for_writing(workspace):
    # uid 0 without capabilities may write host sysctls (core_pattern runs a program as root on a
    # crash) and /proc/sysrq-trigger (reboot, crash) when /proc/sys is the sandbox procfs's own.
    targets = ["/proc/sys/kernel/core_pattern", "/proc/sys/kernel/panic", "/proc/sys/vm/drop_caches",
               "/proc/sysrq-trigger"]
    found = _inside(TRY_OPEN, workspace, "w", *targets)
    assert all(found[path] != "opened" for path in targets), found
    # The sandbox still has its own, readable /proc (pdb and pytest read /proc/self).
    assert _inside(TRY_OPEN, workspace, "r", "/proc/self/status", "/proc/sys/kernel/pid_max") == {
        "/proc/self/status": "opened", "/proc/sys/kernel/pid_max": "opened"}


@needs_bwrap
def test_runs_as_a_non_root_uid(workspace):
    found = _inside("import json, os; print(json.dumps([os.getuid(), os.geteuid(), os.getgid()]))", workspace)
    assert 0 not in found, found


@needs_bwrap
def test_host_secrets_and_home_folders_are_invisible(workspace, host_folder):
    secret = host_folder / "secret.txt"
    secret.write_text("top secret\n")
    secret.chmod(0o600)
    home_secret = Path(tempfile.mkdtemp(prefix="pdbgym-escape-", dir=Path.home())) / "key"
    try:
        home_secret.write_text("home secret\n")
        home_secret.chmod(0o600)
        targets = ["/etc/shadow", str(secret), str(home_secret)]
        found = _inside(TRY_OPEN, workspace, "r", *targets)
        assert all(found[path] != "opened" for path in targets), found
        listing = _inside("import json, os; print(json.dumps({p: os.path.exists(p) for p in "
                          "('/home', '/run', '/var/run', '/etc/ssh', '/root/.ssh', '/root/.bashrc')}))", workspace)
        assert not any(listing.values()), listing
    finally:
        shutil.rmtree(home_secret.parent, ignore_errors=True)


@pytest.fixture
def unix_server(host_folder: Path) -> Iterator[Path]:
    """A unix socket listening in a host folder, answering b'pong', world-connectable."""
    path = host_folder / "service.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    os.chmod(path, 0o777)
    server.listen()
    server.settimeout(10)

    def serve() -> None:
        try:
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.sendall(b"pong")
        except OSError:
            return

    threading.Thread(target=serve, daemon=True).start()
    yield path
    server.close()


CONNECT = """
import json, socket, sys
family, address = sys.argv[1], sys.argv[2]
try:
    if family == "unix":  # a leading @ names an abstract socket
        s = socket.socket(socket.AF_UNIX); s.settimeout(3)
        s.connect("\\0" + address[1:] if address.startswith("@") else address)
    else:
        s = socket.create_connection(("127.0.0.1", int(address)), timeout=3)
    print(json.dumps({"reply": s.recv(4).decode()}))
except OSError as exc:
    print(json.dumps({"error": str(exc)}))
"""


@needs_bwrap
def test_host_unix_socket_is_unreachable(workspace, unix_server):
    assert _inside(CONNECT, workspace, "unix", str(unix_server), kind="plain") == {"reply": "pong"}  # it works
    found = _inside(CONNECT, workspace, "unix", str(unix_server))
    assert "reply" not in found, found


@needs_bwrap
def test_host_abstract_unix_socket_is_unreachable(workspace):
    # Abstract sockets have no file to hide: they belong to the network namespace.
    name = f"\0pdbgym-escape-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX)
    server.bind(name)
    server.listen()
    server.settimeout(10)

    def serve() -> None:
        try:
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.sendall(b"pong")
        except OSError:
            return

    threading.Thread(target=serve, daemon=True).start()
    try:
        assert _inside(CONNECT, workspace, "unix", "@" + name[1:], kind="plain") == {"reply": "pong"}  # it works
        found = _inside(CONNECT, workspace, "unix", "@" + name[1:])
    finally:
        server.close()
    assert "reply" not in found, found


@needs_bwrap
def test_host_tcp_loopback_is_unreachable(workspace):
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)

    def serve() -> None:
        try:
            server.accept()[0].sendall(b"pong")
        except OSError:
            return  # nobody came: the sandbox could not connect

    threading.Thread(target=serve, daemon=True).start()
    try:
        found = _inside(CONNECT, workspace, "tcp", str(server.getsockname()[1]))
    finally:
        server.close()
    assert "reply" not in found, found


WRITE = """
import json, pathlib, sys
found = {}
for target in sys.argv[1:]:
    try:
        pathlib.Path(target).write_text("escaped"); found[target] = "wrote"
    except OSError as exc:
        found[target] = exc.strerror
print(json.dumps(found))
"""


@needs_bwrap
def test_host_files_outside_the_workspace_cannot_be_written(workspace, host_folder):
    targets = [str(host_folder / "planted.txt"), "/etc/pdbgym-planted", str(Path.cwd() / "pdbgym-planted")]
    found = _inside(WRITE, workspace, *targets, str(workspace / "inside.txt"), "/tmp/private.txt")
    assert found[str(workspace / "inside.txt")] == "wrote" and found["/tmp/private.txt"] == "wrote", found
    # A clone under /tmp: the sandbox's /tmp is its own tmpfs, in which the mounts of the clone's venv make
    # the clone's path exist, so a write there lands in that tmpfs. Not an escape, as long as the host never
    # sees the file (the line after).
    private = {str(Path.cwd() / "pdbgym-planted")} if Path.cwd().is_relative_to("/tmp") else set()
    assert all(found[t] != "wrote" for t in targets if t not in private), found
    assert not any(Path(t).exists() for t in targets)
    assert (workspace / "inside.txt").read_text() == "escaped"


HOG = """
import json, subprocess, sys, time
size, count = int(sys.argv[1]), int(sys.argv[2])
child = (
    "import os, sys, time\\n"
    "block = b'x' * int(sys.argv[1])\\n"  # every page written, so it is really resident
    "open(f'ready-{os.getpid()}', 'w').close()\\n"
    "while len([n for n in os.listdir('.') if n.startswith('ready-')]) < int(sys.argv[2]):\\n"
    "    time.sleep(0.05)\\n"
    "print('held', flush=True)\\n"
)
procs = [subprocess.Popen([sys.executable, "-c", child, str(size), str(count)], stdout=subprocess.PIPE, text=True)
         for _ in range(count)]
deadline = time.time() + 40
while any(p.poll() is None for p in procs) and time.time() < deadline:
    if any(p.poll() not in (None, 0) for p in procs):  # one was killed: the others wait in vain
        break
    time.sleep(0.05)
for p in procs:
    if p.poll() is None:
        p.kill()
held = sum("held" in p.communicate()[0] for p in procs)
print(json.dumps({"held": held, "exits": [p.returncode for p in procs]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", [pytest.param("bwrap", marks=needs_bwrap), "plain"])
def test_memory_limit_holds_for_the_whole_process_tree(workspace, kind):
    if not memory_cgroup_available():
        pytest.skip("no memory cgroup can be created here: memory is limited per process only")
    limits = Limits(memory_bytes=2 * GiB, wall_time_s=60)  # 2 GiB per process, 3 GiB for the tree
    assert limits.tree_memory_limit == 3 * GiB
    found = _inside(HOG, workspace, str(int(1.5 * GiB)), "4", kind=kind, limits=limits)
    assert found["held"] <= 1, found  # two 1.5 GiB children and their interpreters exceed 3 GiB


CALLER = """
import json, os, sys
from pathlib import Path
from pdbgym.sandbox import Workspace, get_sandbox
caller = Path(__file__).resolve().parent
source = caller / "project"
source.mkdir()
(source / "m.py").write_text("")
probe = "import json, os, sys; print(json.dumps([os.path.exists(sys.argv[1]), sorted(os.listdir('/tmp'))]))"
with Workspace.create(source) as ws:
    result = get_sandbox("bwrap").run([sys.executable, "-c", probe, str(caller)], ws.path)
print(result.output.strip().splitlines()[-1])
"""


@needs_bwrap
def test_callers_folder_under_tmp_is_not_mounted():
    caller = Path(tempfile.mkdtemp(prefix="pdbgym-caller-", dir="/tmp"))
    try:
        (caller / "script.py").write_text(CALLER)
        proc = subprocess.run([PY, str(caller / "script.py")], cwd=caller, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        visible, tmp_listing = json.loads(proc.stdout.strip().splitlines()[-1])
        assert not visible, tmp_listing
        assert caller.name not in tmp_listing
    finally:
        shutil.rmtree(caller, ignore_errors=True)


@needs_bwrap
def test_workspace_tmp_and_home_are_writable_for_the_sandbox_user(workspace):
    script = """
    import json, os, pathlib, tempfile
    home = pathlib.Path(os.environ["HOME"])
    (home / "cfg").write_text("x")
    with tempfile.NamedTemporaryFile(dir="/tmp") as handle:
        handle.write(b"x")
    pathlib.Path("new.txt").write_text("x")
    pathlib.Path("mod.py").write_text("VALUE = 2\\n")  # a file the host copied in
    os.mkdir("pkg")
    print(json.dumps("ok"))
    """
    assert _inside(script, workspace) == "ok"
    assert (workspace / "mod.py").read_text() == "VALUE = 2\n"


def test_package_folder_is_found_from_the_parent_of_a_clone_named_pdbgym(tmp_path):
    # From the parent folder of a clone, ``import pdbgym`` can resolve to the clone folder as a
    # namespace package (no __file__); finding the package must not depend on pdbgym.__file__.
    (tmp_path / "pdbgym").mkdir()
    (tmp_path / "pdbgym" / "README.md").write_text("a clone's root folder\n")
    script = ("import pdbgym; from pdbgym.sandbox.bwrap import package_dir; "
              "print(getattr(pdbgym, '__file__', None)); print(package_dir())")
    proc = subprocess.run([PY, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (Path(proc.stdout.splitlines()[-1]) / "sandbox" / "bwrap.py").is_file()
