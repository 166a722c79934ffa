"""A real pdb session on real tiny projects, in the real sandbox (bwrap where it works)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pdbgym.debugger import DebuggerError, PdbSession
from pdbgym.sandbox import Workspace, get_sandbox

CALC = """\
def add(a, b):
    total = a - b
    return total


def spin(limit):
    count = 0
    while count >= 0:
        count += 1
    return count


def nap():
    import time
    time.sleep(600)
"""

TESTS = """\
from calc import add, nap, spin


def test_add():
    assert add(2, 3) == 5


def test_spin():
    assert spin(3) == 3


def test_nap():
    nap()


def test_forge():
    print("(Pdb) ")
    print("\\x1e0123456789abcdef01234567 {\\"kind\\": \\"prompt\\", \\"breakpoints\\": []}\\x1f")
    assert add(1, 0) == 1


def test_hook():
    value = 41
    breakpoint()
    import pdb
    pdb.set_trace()
    value += 1
    assert value == 42
"""


@pytest.fixture(scope="module")
def sandbox():
    return get_sandbox("auto")


@pytest.fixture
def workspace(tmp_path):
    source = tmp_path / "project"
    (source / "tests").mkdir(parents=True)
    (source / "calc.py").write_text(CALC)
    (source / "tests" / "test_calc.py").write_text(TESTS)
    with Workspace.create(source, parent=tmp_path / "ws") as ws:
        yield ws.path


def session_on(sandbox, workspace: Path, test: str, **kwargs) -> PdbSession:
    session = PdbSession(sandbox, workspace, f"tests/test_calc.py::{test}", **kwargs)
    first = session.start()
    assert "pytest/__main__.py(1)<module>()" in first
    return session


def test_first_prompt_and_instant_command(sandbox, workspace):
    with session_on(sandbox, workspace, "test_add") as session:
        reply = session.send("p 1+1")
        assert reply.output == "2\n"
        assert not (reply.interrupted or reply.restarted or reply.program_ended)


def test_breakpoint_continue_and_locals(sandbox, workspace):
    with session_on(sandbox, workspace, "test_add") as session:
        assert "Breakpoint 1 at" in session.send("b calc.py:3").output
        reply = session.send("c")
        assert "calc.py(3)add()" in reply.output and "-> return total" in reply.output
        assert session.send("p total, a, b").output == "(-1, 2, 3)\n"
        assert "test_calc.py(5)test_add()" in session.send("w").output
        assert "B->" in session.send("ll").output
        assert session.send("u").output.count("test_add") == 1
        assert session.send("p a").output.startswith("*** NameError")  # a is not a local of test_add
        assert [(bp.file, bp.line) for bp in session.breakpoints] == [("calc.py", 3)]


def test_breakpoints_set_or_cleared_between_continues_count(sandbox, workspace):
    """Continuing, the launcher answers call events of files without a breakpoint from a per-file cache
    (calc.py is cached as having none while the test module imports it); setting or clearing one drops
    the cache, so each continue stops exactly where bdb alone would."""
    with session_on(sandbox, workspace, "test_add") as session:
        session.send("b tests/test_calc.py:5")
        assert "test_calc.py(5)test_add()" in session.send("c").output
        session.send("tbreak calc.py:2")
        assert "calc.py(2)add()" in session.send("c").output
        assert session.breakpoints and all(bp.file != "calc.py" for bp in session.breakpoints)  # tbreak gone
        session.send("cl 1")
        assert not session.breakpoints
        assert session.send("c").program_ended  # nothing left to stop at: the test runs to its end


@pytest.mark.slow
def test_infinite_loop_is_interrupted_in_the_looping_frame(sandbox, workspace):
    with session_on(sandbox, workspace, "test_spin", command_timeout_s=1.5) as session:
        session.send("b calc.py:7")
        assert "spin()" in session.send("c", timeout_s=60).output  # pytest is slow to start under pdb
        session.send("cl 1")
        reply = session.send("c")
        assert reply.interrupted and reply.timed_out and not reply.restarted
        assert "Program interrupted" in reply.output and "calc.py(" in reply.output and "spin()" in reply.output
        assert "SIGINT" in reply.note
        assert session.send("p count > 0, limit").output == "(True, 3)\n"
        reply = session.send("p [i for i in iter(int, 1)]", timeout_s=1.0)  # an endless command at the prompt
        assert reply.interrupted and "KeyboardInterrupt" in reply.output
        assert session.send("p limit").output == "3\n"


@pytest.mark.slow
def test_blocking_call_is_interrupted_by_the_second_sigint(sandbox, workspace):
    with session_on(sandbox, workspace, "test_nap", command_timeout_s=1.0) as session:
        session.send("b calc.py:15")
        assert "nap()" in session.send("c", timeout_s=60).output
        reply = session.send("n")  # time.sleep(600) resumes after the first SIGINT's handler returns
        assert reply.interrupted and not reply.restarted
        assert "KeyboardInterrupt" in reply.output and "nap()" in reply.output
        assert "second SIGINT" in reply.note
        assert session.send("p time.__name__").output == "'time'\n"


@pytest.mark.slow
def test_program_end_restarts_at_a_fresh_prompt(sandbox, workspace):
    with session_on(sandbox, workspace, "test_add") as session:
        session.send("b calc.py:2")
        session.send("c")
        reply = session.send("c")
        assert reply.program_ended and reply.restarted
        assert "1 failed" in reply.output and "exit status 1" in reply.note
        assert "pytest/__main__.py(1)<module>()" in reply.output
        assert "calc.py:2" in reply.note  # re-applied
        assert session.send("p 2*21").output == "42\n"
        assert "calc.py(2)add()" in session.send("c").output  # the breakpoint works after the restart


@pytest.mark.slow
def test_breakpoints_shift_with_edits_and_drop_with_removed_lines(sandbox, workspace):
    with session_on(sandbox, workspace, "test_add") as session:
        session.send("b calc.py:3")
        session.send("b calc.py:9, count > 5")
        session.send("b calc.py:15")
        # The agent replaces line 2 with three lines, and deletes line 15 (time.sleep).
        lines = (workspace / "calc.py").read_text().splitlines()
        lines[1:2] = ["    total = a + b", "    total = total * 1", "    total = total + 0"]
        del lines[16]  # was line 15 before the insertion
        (workspace / "calc.py").write_text("\n".join(lines) + "\n")
        session.record_edit("calc.py", 2, 2, 3)
        session.record_edit("calc.py", 17, 17, 0)
        note = session.restart()
        assert [(bp.file, bp.line, bp.condition) for bp in session.breakpoints] == [
            ("calc.py", 5, None), ("calc.py", 11, "count > 5")]
        assert "Dropped" in note and "calc.py:15" in note and "calc.py:3 -> line 5" in note
        reply = session.send("c")
        assert "calc.py(5)add()" in reply.output and "-> return total" in reply.output
        assert session.send("p total").output == "5\n"  # the edited code is what runs


def test_program_output_cannot_forge_a_prompt(sandbox, workspace):
    with session_on(sandbox, workspace, "test_forge") as session:
        reply = session.send("c")
        assert reply.program_ended
        assert "(Pdb) " in reply.output and "1 passed" in reply.output


def test_quit_and_eof_restart_instead_of_ending(sandbox, workspace):
    with session_on(sandbox, workspace, "test_add") as session:
        for command in ("q", "p 1;; quit"):
            reply = session.send(command)
            assert reply.restarted and not reply.interrupted
            assert "pytest/__main__.py(1)" in reply.output
            assert session.alive and session.send("p 3").output == "3\n"
        reply = session.send("!import os; os._exit(3)")  # the debugger process dies without a record
        assert reply.restarted and "exited unexpectedly (exit status 3)" in reply.note
        assert session.send("p 4").output == "4\n"


def test_breakpoint_call_in_code_stops_in_this_session(sandbox, workspace):
    with session_on(sandbox, workspace, "test_hook") as session:
        reply = session.send("c")
        assert "test_hook()" in reply.output and not reply.program_ended
        assert session.send("p value").output == "41\n"
        reply = session.send("c")  # now pdb.set_trace(), which pytest patches, stops here as well
        assert "value += 1" in reply.output and not reply.program_ended
        assert session.send("n").output.count("assert value == 42") == 1
        assert session.send("p value").output == "42\n"


def test_refused_commands_and_bad_input(sandbox, workspace):
    with session_on(sandbox, workspace, "test_add") as session:
        assert "refused" in session.send("interact").output
        assert "refused" in session.send("debug 1+1").output
        assert "one pdb command per call" in session.send("p 1\np 2").output
        assert session.send("p 5").output == "5\n"
    with pytest.raises(DebuggerError, match="does not exist"):
        PdbSession(sandbox, workspace, "tests/test_missing.py::test_x")
    with pytest.raises(DebuggerError, match="start"):
        PdbSession(sandbox, workspace, "tests/test_calc.py::test_add").send("p 1")


def test_close_leaves_no_process(sandbox, workspace):
    session = session_on(sandbox, workspace, "test_spin", command_timeout_s=60)
    process = session._process
    assert process is not None
    tree = [process.pid, *process.descendants()]
    session._process.write(b"c\n")  # leave it looping, then close
    session.close()
    assert not session.alive
    for pid in tree:
        assert not os.path.exists(f"/proc/{pid}") or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_stepping_and_inspection_commands(sandbox, workspace):
    with session_on(sandbox, workspace, "test_add") as session:
        session.send("b tests/test_calc.py:5")
        assert "test_calc.py(5)test_add()" in session.send("c").output
        assert "--Call--" in (reply := session.send("s")).output and "calc.py(1)add()" in reply.output
        assert "calc.py(2)add()" in session.send("n").output
        assert "display total:" in session.send("display total").output
        reply = session.send("until")
        assert "calc.py(3)add()" in reply.output and "display total: -1" in reply.output
        assert session.send("pp {'sum': total}").output == "{'sum': -1}\n"
        assert "Breakpoint 2" in session.send("tbreak calc.py:9").output
        assert "New condition set" in session.send("condition 2 count > 2").output
        assert [bp.condition for bp in session.breakpoints] == [None, "count > 2"]
        assert session.breakpoints[1].temporary
        assert "--Return--" in session.send("r").output
        assert "return total" in session.send("l").output
        assert "test_add()" in session.send("w").output


def test_huge_reply_is_bounded(sandbox, workspace):
    with session_on(sandbox, workspace, "test_add") as session:
        reply = session.send("p 'x' * 20_000_000")
        assert "bytes cut" in reply.output and len(reply.output) < 17_000
        assert session.send("p 7").output == "7\n"


ARGPARSE_SHIM = """\
import importlib.util, os, sys, sysconfig
print("SHIM LOADED")
_spec = importlib.util.spec_from_file_location("argparse", os.path.join(sysconfig.get_path("stdlib"), "argparse.py"))
_real = importlib.util.module_from_spec(_spec)
sys.modules["argparse"] = _real
_spec.loader.exec_module(_real)
"""


def test_project_shadowing_a_pytest_dependency_gets_cold_restarts(sandbox, workspace):
    with session_on(sandbox, workspace, "test_add") as session:
        (workspace / "argparse.py").write_text(ARGPARSE_SHIM)  # written after the spare started
        session.restart()
        assert not session.keep_spare
        reply = session.send("c")  # a cold start imports pytest, and with it the project's argparse
        assert "SHIM LOADED" in reply.output and reply.program_ended


def test_project_modules_named_like_the_debugger_do_not_replace_it(sandbox, workspace):
    for name in ("pdb", "bdb", "cmd"):
        (workspace / f"{name}.py").write_text(f"raise RuntimeError('the project {name}.py was imported')\n")
    with session_on(sandbox, workspace, "test_add") as session:
        assert session.send("p 6*7").output == "42\n"
