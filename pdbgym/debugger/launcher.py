"""Runs pytest under a stdlib ``pdb.Pdb`` subclass; started inside the sandbox as a script.

Standalone on purpose (stdlib only, no pdbgym import): it runs under the sandbox's interpreter, which
need not have pdbgym installed. Run with ``python -P launcher.py [--spare] PYTEST_ARGS...``; the first
line of stdin is a JSON handshake ``{"nonce": str, "breakpoints": [...]}``. With ``--spare`` it imports
pytest (with the project off sys.path) before reading the handshake, so a session can start it ahead
of a restart; if the project holds a module that a cold start would have imported in place of one
the spare loaded (a project shadowing a pytest dependency), it answers the handshake with a
``stale`` record instead of running.

Protocol on stdout: program and pdb output as-is, plus records ``\\x1e<nonce> <json>\\x1f``. The pdb
prompt *is* such a record (``{"kind": "prompt", "breakpoints": [...]}``), so no program output can
imitate it without the per-session nonce, which only ever travels over stdin. When the program ends
the launcher prints ``{"kind": "ended", "reason": ..., "status": ...}`` and exits; the session then
starts a fresh process, so edited modules are re-imported.
"""

import json
import os
import signal
import sys
import sysconfig
import traceback

RECORD_START = "\x1e"
RECORD_END = "\x1f"
REFUSED = {
    "interact": "*** pdbgym: 'interact' is refused (its console cannot be bounded); use p/pp/! instead",
    "debug": "*** pdbgym: 'debug' (a nested debugger) is refused; set a breakpoint and step instead",
}


def import_stdlib_debugger():
    """Import pdb, bdb and cmd from the standard library even if the project shadows them (cmd.py)."""
    stdlib_dirs = {sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")}
    for name in ("pdb", "bdb", "cmd"):
        module = sys.modules.get(name)
        if module is not None and os.path.dirname(getattr(module, "__file__", "") or "") not in stdlib_dirs:
            del sys.modules[name]  # a .pth hack (pdb++) imported a replacement at start-up
    saved_path = sys.path[:]
    sys.path[:] = [entry for entry in saved_path if entry in stdlib_dirs or "lib-dynload" in entry]
    try:
        # the standard library's own debugger: imported here, with sys.path cut to the stdlib, never a replacement
        import bdb
        import cmd
        import pdb
    finally:
        sys.path[:] = saved_path
    return bdb, cmd, pdb


bdb, cmd, pdb = import_stdlib_debugger()


def emit(nonce, payload):
    sys.stdout.flush()
    sys.stderr.flush()
    sys.__stdout__.write(RECORD_START + nonce + " " + json.dumps(payload) + RECORD_END)
    sys.__stdout__.flush()


def breakpoint_table():
    table = []
    for bp in bdb.Breakpoint.bpbynumber:
        if bp is None:
            continue
        table.append({"number": bp.number, "file": bp.file, "line": bp.line, "condition": bp.cond,
                      "enabled": bool(bp.enabled), "temporary": bool(bp.temporary),
                      "funcname": bp.funcname})
    return table


class SessionPdb(pdb.Pdb):
    """Stdlib pdb whose prompt is a nonce-tagged record carrying the breakpoint table."""

    def __init__(self, nonce=""):
        self.files_with_breaks = {}  # co_filename -> whether bdb holds a breakpoint in it (trace_dispatch)
        super().__init__(nosigint=True, readrc=False)
        self.use_rawinput = False  # readline would echo commands and cap line length
        self.nonce = nonce
        self.interrupt_pending = False
        self.user_requested_quit = False

    @property
    def prompt(self):
        return (RECORD_START + self.nonce + " "
                + json.dumps({"kind": "prompt", "breakpoints": breakpoint_table()}) + RECORD_END)

    @prompt.setter
    def prompt(self, value):
        pass  # pdb assigns "(Pdb) " and "(com) "; the record replaces both

    def do_quit(self, arg):
        self.user_requested_quit = True
        return super().do_quit(arg)

    do_q = do_exit = do_quit

    def do_EOF(self, arg):
        self.user_requested_quit = True
        return super().do_EOF(arg)

    def interaction(self, frame, traceback_):
        self.interrupt_pending = False
        super().interaction(frame, traceback_)

    def stop_here(self, frame):
        # Never stop in the launcher's own code (the SIGINT handler runs while tracing is live).
        if frame.f_code.co_filename == __file__:
            return False
        return super().stop_here(frame)

    def trace_dispatch(self, frame, event, arg):
        """bdb's, answering the common case first. Continuing (``c``) with a breakpoint set, bdb is called
        for every function call (pytest's collection makes about 10^5) only to return None for each one in
        a file without a breakpoint; that answer is given here from a per-file cache, before bdb's layers
        of Python calls. Stepping, ``next``, ``until`` and ``return`` go to bdb unchanged."""
        if event == "call" and self.stoplineno == -1 and self.stopframe is self.botframe \
                and self.botframe is not None and not self.quitting:
            filename = frame.f_code.co_filename
            has_breaks = self.files_with_breaks.get(filename)
            if has_breaks is None:
                has_breaks = self.files_with_breaks[filename] = self.canonic(filename) in self.breaks
            if not has_breaks:
                return None
        return super().trace_dispatch(frame, event, arg)

    # Every way bdb adds a breakpoint, or removes the last one of a file (``tbreak`` clears through
    # clear_bpbynumber), drops the cache above.
    def _add_to_breaks(self, *args, **kwargs):
        self.files_with_breaks.clear()
        return super()._add_to_breaks(*args, **kwargs)

    def _prune_breaks(self, *args, **kwargs):
        self.files_with_breaks.clear()
        return super()._prune_breaks(*args, **kwargs)

    def clear_all_file_breaks(self, *args, **kwargs):
        self.files_with_breaks.clear()
        return super().clear_all_file_breaks(*args, **kwargs)

    def clear_all_breaks(self, *args, **kwargs):
        self.files_with_breaks.clear()
        return super().clear_all_breaks(*args, **kwargs)

    def do_interact(self, arg):
        self.message(REFUSED["interact"])

    def do_debug(self, arg):
        self.message(REFUSED["debug"])

    def on_sigint(self, signum, frame):
        """First SIGINT: stop at the next line of the running code. Second: raise KeyboardInterrupt.

        At the prompt (``allow_kbdint``) it cancels the command, as pdb does. The second signal
        covers code blocked in a C call (``time.sleep``), which never reaches a next line.
        """
        if self.allow_kbdint or self.interrupt_pending:
            raise KeyboardInterrupt
        # Under `next` or `until` the trace function is live: calls made from here would be traced
        # and we would stop inside bdb. Switch it off; set_trace turns it back on, stepping.
        sys.settrace(None)
        self.interrupt_pending = True
        self.message("\nProgram interrupted. (Use 'cont' to resume).")
        self.set_trace(frame)


DEBUGGER = None


def breakpoint_hook(*args, **kwargs):
    """``breakpoint()`` in the project (PYTHONBREAKPOINT=__main__.breakpoint_hook) stops in this
    session's debugger rather than starting a nested one that would not speak the protocol."""
    DEBUGGER.set_trace(sys._getframe(1))


class SharedDebugger:
    """``--pdbcls=__main__:SharedDebugger``: pytest's patched ``pdb.set_trace`` builds an instance of
    a subclass of this and calls ``set_trace`` on it; handing back the session's debugger makes
    ``import pdb; pdb.set_trace()`` in the project stop here too."""

    def __new__(cls, *args, **kwargs):
        return DEBUGGER


def apply_breakpoints(debugger, breakpoints):
    for spec in breakpoints:
        error = debugger.set_break(spec["file"], spec["line"], spec.get("temporary", False),
                                   spec.get("condition"), spec.get("funcname"))
        if error:
            debugger.message(f"*** pdbgym: could not re-apply breakpoint {spec['file']}:{spec['line']}: {error}")
        elif not spec.get("enabled", True):
            debugger.get_breaks(spec["file"], spec["line"])[-1].disable()


def pytest_main_code():
    """pytest's ``__main__`` as a code object, found without importing pytest (that is slow)."""
    import importlib.util  # in the sandbox: only the pytest path needs it, every pdb session starts without it

    spec = importlib.util.find_spec("pytest")
    locations = spec.submodule_search_locations if spec is not None else None
    if not locations:
        raise SystemExit("pdbgym launcher: pytest is not importable by " + sys.executable)
    path = os.path.join(locations[0], "__main__.py")
    with open(path, encoding="utf-8") as source:
        return path, compile(source.read(), path, "exec")


def preimport_pytest(folder):
    """Import pytest with ``folder`` off sys.path, so no project code runs before the handshake."""
    saved = sys.path[:]
    real = os.path.realpath(folder)
    sys.path[:] = [entry for entry in saved if os.path.realpath(entry or ".") != real]
    try:
        import pytest  # noqa: F401  # with the project folder off sys.path: no project code runs yet
    except BaseException:
        pass  # the run itself will report it, as a cold start would
    finally:
        sys.path[:] = saved


def shadowed_by(folder):
    """Imported top-level modules that a file in ``folder`` would have provided in a cold start."""
    names = {name.partition(".")[0] for name in list(sys.modules)}
    return sorted(name for name in names
                  if os.path.isfile(os.path.join(folder, name + ".py"))
                  or os.path.isfile(os.path.join(folder, name, "__init__.py")))


def main():
    # A spare is started ahead of a restart: it pays for the slow imports, then waits on stdin.
    spare = sys.argv[1:2] == ["--spare"]
    pytest_args = sys.argv[2:] if spare else sys.argv[1:]
    sys.path.insert(0, os.getcwd())  # what `python -m pytest` puts first
    origin, code = pytest_main_code()
    if spare:
        preimport_pytest(os.getcwd())
    global DEBUGGER
    debugger = DEBUGGER = SessionPdb()  # before the handshake: its set-up (readline) is not free
    handshake = json.loads(sys.stdin.readline())
    nonce = debugger.nonce = handshake["nonce"]
    stale = shadowed_by(os.getcwd()) if spare else []
    if stale:
        # The project provides modules the spare took from elsewhere: only a cold start is faithful.
        emit(nonce, {"kind": "stale", "modules": stale[:20]})
        os._exit(0)
    sys.argv = ["pytest", *pytest_args]
    apply_breakpoints(debugger, handshake.get("breakpoints", []))
    signal.signal(signal.SIGINT, debugger.on_sigint)
    program_globals = {"__name__": "__main__", "__file__": origin, "__builtins__": __builtins__}
    ended = {"kind": "ended", "reason": "finished", "status": 0}
    try:
        debugger.run(code, program_globals)
        if debugger.user_requested_quit:
            ended["reason"] = "quit"
    except SystemExit as exc:
        ended["status"] = exc.code if isinstance(exc.code, int) or exc.code is None else str(exc.code)
    except pdb.Restart:
        ended["reason"] = "restart"
    except BaseException:
        traceback.print_exc()
        ended.update(reason="exception", status=None)
    emit(nonce, ended)
    os._exit(0)  # no atexit hooks or lingering threads of the program may hold the session


if __name__ == "__main__":
    main()
