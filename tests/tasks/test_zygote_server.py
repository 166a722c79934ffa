"""The pytest fork server (``pdbgym.grading.server``): hostile runs against the runs that come after them.

Each attack is a hardened test run (the guard off: this layer alone) or a pdb session forked from a real
server in a real bubblewrap sandbox; a clean run forked next must see a pristine interpreter, and the
server must be out of reach (its files read-only, its memory closed to ``ptrace``, changes made to it from
outside refused). Each test checks that the runs it compares were forked (``jobs_run``), not run afresh.
"""

from __future__ import annotations

import hashlib
import json
import platform
import signal
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import pdbgym.grading.plugin
import pdbgym.grading.server  # noqa: F401  (its file; importing it here imports only pytest)
from pdbgym.debugger import PdbSession
from pdbgym.env.zygotes import server_argv
from pdbgym.grading.testrun import ZYGOTE_SERVER, run_tests
from pdbgym.sandbox import Workspace, get_sandbox
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason
from pdbgym.sandbox.zygote import Zygote, ZygoteError
from pdbgym.tasks.model import Task, load_task

needs_bwrap = pytest.mark.skipif(bwrap_unavailable_reason() is not None, reason=str(bwrap_unavailable_reason()))
x86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="raw syscall numbers for x86_64")

PRISTINE_TEST = '''
import builtins, json, os, signal, sys
import _pytest.python, _pytest.runner


def test_the_interpreter_is_pristine():
    assert "leaked_module" not in sys.modules
    assert json.dumps({"a": 1}) == '{"a": 1}'
    assert _pytest.runner.pytest_runtest_makereport.__module__ == "_pytest.runner"
    assert _pytest.python.Function.runtest.__module__ == "_pytest.python"
    assert "LEAKED" not in os.environ
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert not hasattr(builtins, "LEAKED")
    assert "/tmp/leak" not in sys.path
    assert os.getcwd() == os.environ["PDBGYM_EXPECTED_CWD"]
'''


def _project(parent: Path, name: str, package_init: str = "", test: str = PRISTINE_TEST,
             conftest: str | None = None) -> Task:
    """A task folder with package ``pkg`` (``__init__`` = ``package_init``) and one test module."""
    root = parent / name
    (root / "repo" / "pkg").mkdir(parents=True)
    (root / "repo" / "pkg" / "__init__.py").write_text(textwrap.dedent(package_init))
    (root / "repo" / "tests").mkdir()
    (root / "repo" / "tests" / "test_it.py").write_text("import pkg  # noqa: F401\n" + textwrap.dedent(test))
    if conftest is not None:
        (root / "repo" / "tests" / "conftest.py").write_text(textwrap.dedent(conftest))
    (root / "task.json").write_text(json.dumps({
        "instance_id": f"zygote__{name}", "FAIL_TO_PASS": ["tests/test_it.py::test_the_interpreter_is_pristine"]
        if test is PRISTINE_TEST else ["tests/test_it.py::test_it"], "PASS_TO_PASS": [],
        "patch": "--- a/pkg/x.py\n+++ b/pkg/x.py\n@@ -0,0 +1 @@\n+x = 1\n",  # never applied here
    }))
    return load_task(root)


@pytest.fixture(autouse=True)
def sigint_not_ignored() -> Iterator[None]:
    """Interpreters inherit SIGINT's disposition: a suite started from a shell's background job has it
    ignored, and so would the server, every run it forks and a fresh interpreter, which the pristine test
    would take for a leak. Started with it not ignored, each holds Python's own handler, what it expects."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    server = Zygote(get_sandbox("bwrap"), server_argv())
    server.wait_ready()
    yield server
    server.close()


def _run(zygote: Zygote, task: Task, expected_cwd: bool = False):
    with Workspace.create(task.repo, zygote.folder) as ws:
        if expected_cwd:  # the pristine test reads where it should be from the project itself
            init = ws.path / "pkg" / "__init__.py"
            init.write_text(f"import os\nos.environ['PDBGYM_EXPECTED_CWD'] = {str(ws.path)!r}\n" + init.read_text())
        return run_tests(zygote.sandbox, ws.path, task, task.all_tests, zygote=zygote)


def _assert_pristine_after(zygote: Zygote, tmp_path: Path, jobs_before: int) -> None:
    clean = _project(tmp_path, "clean")
    run = _run(zygote, clean, expected_cwd=True)
    assert zygote.jobs_run == jobs_before + 1, "the clean run was not forked from the server"
    assert run.all_passed(clean.all_tests) and not run.tampered, (run.outcomes, run.tampered, run.output[-2000:])


LEAKS = '''
import builtins, json, os, signal, sys
import _pytest.runner
sys.modules["leaked_module"] = type(sys)("leaked_module")
json.dumps = lambda *args, **kwargs: "forged"
_pytest.runner.pytest_runtest_makereport = lambda item, call: None
os.environ["LEAKED"] = "1"
signal.signal(signal.SIGUSR1, lambda *args: None)
signal.signal(signal.SIGINT, signal.SIG_IGN)
builtins.LEAKED = True
sys.path.insert(0, "/tmp/leak")
os.chdir("/")
'''

CONFTEST_PATCHING_PYTEST = '''
import _pytest.python
_pytest.python.Function.runtest = lambda self: None  # every test "passes" without running
'''


@needs_bwrap
def test_a_run_that_patches_everything_leaves_the_next_run_pristine(zygote, tmp_path):
    """sys.modules, a patched json and _pytest, the environment, signal handlers, builtins, sys.path, the
    working folder, and a conftest that monkeypatches pytest internals: none of it reaches the next run."""
    hostile = _project(tmp_path, "hostile", LEAKS, test="def test_it():\n    assert False\n",
                       conftest=CONFTEST_PATCHING_PYTEST)
    run = _run(zygote, hostile)
    assert zygote.jobs_run == 1
    assert run.tampered, (run.outcomes, run.output[-1500:])  # the report plugin saw its own run patched
    _assert_pristine_after(zygote, tmp_path, 1)


@needs_bwrap
def test_a_pdb_session_that_patches_everything_leaves_the_next_run_pristine(zygote, tmp_path):
    """The agent's pdb session is a child of the same server: what it does in its interpreter stays there."""
    task = _project(tmp_path, "debugged", test="def test_it():\n    assert True\n")
    with Workspace.create(task.repo, zygote.folder) as ws, \
            PdbSession(zygote.sandbox, ws.path, "tests/test_it.py::test_it", zygote=zygote) as session:
        session.start()
        # (json.dumps stays: the session's own prompt record is made with it)
        leaks = LEAKS.replace('json.dumps = lambda *args, **kwargs: "forged"', "")
        reply = session.send(f"!exec({leaks!r}, {{}}); print('ZYGOTE-LEAKED', __import__('os').environ['LEAKED'])")
        assert "ZYGOTE-LEAKED 1" in reply.output, reply.output
        assert session.zygote is zygote and zygote.jobs_run == 1
        _assert_pristine_after(zygote, tmp_path, 1)


@needs_bwrap
def test_a_run_cannot_write_the_files_the_server_imported(zygote, tmp_path):
    """The server's modules (pytest, pdbgym's runtime copy, the server itself) are read-only in the sandbox:
    no run can plant code for the next one there."""
    import _pytest.runner
    import pytest as pytest_module

    targets = [Path(pytest_module.__file__), Path(_pytest.runner.__file__), Path(ZYGOTE_SERVER),
               Path(pdbgym.grading.plugin.__file__)]
    before = {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in targets}
    attack = "import errno, os\nfor _path in %r:\n" % [str(p) for p in targets] + textwrap.indent(textwrap.dedent('''
        for _how in ("a", "w"):
            try:
                open(_path, _how).write("raise SystemExit('planted')\\n")
                print("ZYGOTE-WROTE", _path)
            except OSError as exc:
                print("ZYGOTE-REFUSED", errno.errorcode[exc.errno], _path)
        try:
            os.rename(_path, _path + ".moved")
            print("ZYGOTE-WROTE", _path)
        except OSError as exc:
            print("ZYGOTE-REFUSED", errno.errorcode[exc.errno], _path)
    '''), "    ")
    run = _run(zygote, _project(tmp_path, "writer", attack, test="def test_it():\n    assert True\n"))
    assert "ZYGOTE-WROTE" not in run.output, run.output[-2000:]
    assert run.output.count("ZYGOTE-REFUSED") == 3 * len(targets), run.output[-2000:]
    assert {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in targets} == before
    _assert_pristine_after(zygote, tmp_path, 1)


@needs_bwrap
def test_a_run_cannot_read_or_trace_the_server(zygote, tmp_path):
    """The server is not dumpable: its children (same uid) get none of its /proc/<pid>/mem, environ, maps or
    descriptors, and no ptrace."""
    attack = '''
        import ctypes, errno, os
        _server = os.getppid()
        for _what in ("mem", "environ", "maps", "fd/0", "fd/1", "fd/3", "fd/4"):
            try:
                _path = f"/proc/{_server}/{_what}"
                os.readlink(_path) if _what.startswith("fd/") else open(_path, "rb").read(1)
                print("ZYGOTE-READ", _what)
            except OSError as exc:
                print("ZYGOTE-REFUSED", _what, errno.errorcode[exc.errno])
        try:  # its descriptors' numbers can be listed (the listing is root's, and so the sandbox's), not opened
            for _fd in os.listdir(f"/proc/{_server}/fd"):
                open(f"/proc/{_server}/fd/{_fd}", "rb")
                print("ZYGOTE-READ", "fd", _fd)
        except OSError as exc:
            print("ZYGOTE-REFUSED", "fd", errno.errorcode[exc.errno])
        _libc = ctypes.CDLL(None, use_errno=True)
        if _libc.ptrace(16, _server, 0, 0) == 0:  # PTRACE_ATTACH
            print("ZYGOTE-READ", "ptrace")
        else:
            print("ZYGOTE-REFUSED", "ptrace", errno.errorcode[ctypes.get_errno()])
    '''
    run = _run(zygote, _project(tmp_path, "tracer", attack, test="def test_it():\n    assert True\n"))
    assert "ZYGOTE-READ" not in run.output, run.output[-2000:]
    assert run.output.count("ZYGOTE-REFUSED") == 9, run.output[-2000:]
    _assert_pristine_after(zygote, tmp_path, 1)


@needs_bwrap
def test_a_server_changed_from_outside_refuses_and_the_run_starts_afresh(zygote, tmp_path):
    """A child may lower its server's rlimits (same uid: no ptrace needed); a later child would inherit
    them. The server checks itself before each fork: changed, it refuses and ends, and the run is made by a
    fresh interpreter instead, with the right outcome."""
    attack = '''
        import os, resource
        try:
            resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (64, 64))
            print("ZYGOTE-CHANGED")
        except OSError as exc:
            print("ZYGOTE-REFUSED", exc)
    '''
    run = _run(zygote, _project(tmp_path, "changer", attack, test="def test_it():\n    assert True\n"))
    assert zygote.jobs_run == 1 and run.all_passed(["tests/test_it.py::test_it"])
    clean = _project(tmp_path, "clean")
    after = _run(zygote, clean, expected_cwd=True)
    assert after.all_passed(clean.all_tests) and not after.tampered, after.output[-1500:]
    if "ZYGOTE-CHANGED" in run.output:
        assert zygote.jobs_run == 1, "the changed server forked another run"
        with pytest.raises(ZygoteError):
            zygote.sweep()


@needs_bwrap
def test_a_run_that_kills_its_server_is_made_again_by_a_fresh_interpreter(zygote, tmp_path):
    """Ending the server takes its status report with it: that run's result is not used, the run is made
    afresh (where the same code cannot end its sandbox's init), and the outcome is the real one."""
    attack = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
    task = _project(tmp_path, "killer", attack, test="def test_it():\n    assert 1 + 1 == 3\n")
    run = _run(zygote, task)
    assert run.outcomes == {"tests/test_it.py::test_it": "failed"}, (run.outcomes, run.output[-1500:])
    assert not run.tampered and not zygote.alive


@needs_bwrap
@x86_64
def test_a_sweep_leaves_nothing_a_run_made_for_the_next_one(zygote, tmp_path):
    """A run leaves a daemon, files in /tmp and /dev/shm, a System V segment, a POSIX message queue and a key
    in the user keyring. The daemon ends with the run; the sweep removes the rest; the next run finds none."""
    attack = '''
        import ctypes, os, subprocess, sys
        _marker = os.path.join(os.path.dirname(os.path.dirname(__file__)), "daemon.txt")
        subprocess.Popen([sys.executable, "-c", "import os, time\\n"
                          "if os.fork(): os._exit(0)\\n"
                          f"while True:\\n open({_marker!r}, 'w').write(str(time.time())); time.sleep(0.02)"],
                         start_new_session=True)
        open("/tmp/leftover", "w").write("x")
        open("/dev/shm/leftover", "w").write("x")
        _libc = ctypes.CDLL(None, use_errno=True)
        assert _libc.shmget(0, 4096, 0o1600) >= 0  # IPC_PRIVATE, IPC_CREAT | 0600
        assert _libc.mq_open(b"/leftover", 0o100 | 0o2, 0o600, None) >= 0  # O_CREAT | O_RDWR
        assert _libc.syscall(248, b"user", b"leftover", b"secret", 6, -4) > 0  # add_key to the user keyring
        import time; time.sleep(0.1)
    '''
    task = _project(tmp_path, "litterer", attack, test="def test_it():\n    assert True\n")
    with Workspace.create(task.repo, zygote.folder) as ws:
        run = run_tests(zygote.sandbox, ws.path, task, task.all_tests, zygote=zygote)
        assert run.all_passed(task.all_tests), run.output[-2000:]
        marker = ws.path / "daemon.txt"
        time.sleep(0.3)
        stamp = marker.read_text()
        time.sleep(0.3)
        assert marker.read_text() == stamp, "the run's daemon outlived it"
    swept = zygote.sweep()
    assert swept["ok"] and swept["removed"] >= 4, swept
    check = '''
        import ctypes, os
        assert not os.path.exists("/tmp/leftover") and not os.path.exists("/dev/shm/leftover")
        assert os.listdir("/dev/mqueue") == []
        assert open("/proc/sysvipc/shm").read().splitlines()[1:] == []
        _libc = ctypes.CDLL(None, use_errno=True)
        assert _libc.syscall(250, 10, -4, b"user", b"leftover", 0) == -1  # KEYCTL_SEARCH finds nothing
        try:
            open("/dev/planted", "w")
            raise AssertionError("/dev is writable")
        except OSError:
            pass
    '''
    after = _run(zygote, _project(tmp_path, "checker", check, test="def test_it():\n    assert True\n"))
    assert zygote.jobs_run == 2 and after.all_passed(["tests/test_it.py::test_it"]), after.output[-2000:]
