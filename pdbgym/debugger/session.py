"""A live pdb session on one failing test, inside a sandbox, driven one command at a time.

Reads are select-based and stop at the nonce-tagged prompt record (launcher.py), so an instant
command answers in well under a millisecond of overhead. A command that runs too long is
interrupted with SIGINT sent to the inner Python process (a ``\\x03`` on the pty would kill bwrap):
the agent lands at a prompt in the running frame. Program end, quit and failed interrupts restart
the session; breakpoints survive restarts, shifted by the edits recorded in between.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from pdbgym.debugger.breakpoints import Breakpoint, Edit, shift_breakpoints
from pdbgym.debugger.protocol import BreakpointSpec, LauncherRecord, PromptRecord, RecordScanner
from pdbgym.errors import PdbgymError
from pdbgym.sandbox import Limits, Sandbox, sandbox_env
from pdbgym.sandbox.cpuwait import CommandClock
from pdbgym.sandbox.pty_process import PtyTerminal
from pdbgym.sandbox.zygote import Zygote, ZygoteError

LAUNCHER = Path(__file__).with_name("launcher.py")
# -s: pdb needs the real terminal; -x: stop at the failure; the -p guards keep plugins that would
# fight the session (pdb++, pytest-timeout's alarms, the cache writing into the workspace) out;
# --pdbcls routes pytest's pdb.set_trace to the session's own debugger (see launcher.SharedDebugger).
PYTEST_FLAGS = ("-s", "-x", "--color=no", "-p", "no:cacheprovider", "-p", "no:pdbpp", "-p", "no:timeout",
                "--pdbcls=__main__:SharedDebugger")
RESTART_COMMANDS = frozenset({"q", "quit", "exit", "EOF", "run", "restart"})
INTERRUPT_GRACE_S = 2.0
STARTUP_TIMEOUT_S = 60.0


# Options of a task's test command that cannot run under one pdb session: workers, and reruns.
_SPREADING_OPTIONS = {"-n", "--numprocesses", "--dist", "--maxprocesses", "--reruns"}  # each takes a value
_SPREADING_PLUGINS = {"xdist", "rerunfailures"}


def session_options(options: Sequence[str]) -> list[str]:
    """``options`` (a task's pytest options) without those that spread a run over processes (xdist's
    ``-n``, ``--dist``; ``-p xdist``) or repeat it: under pdb the test runs once, in this process."""
    kept: list[str] = []
    given = iter(options)
    for option in given:
        name, has_value, _ = option.partition("=")
        if name in _SPREADING_OPTIONS:
            if not has_value:
                next(given, None)
            continue
        if option.startswith("-n") and option[2:] and (option[2:].isdigit() or option[2:] in ("auto", "logical")):
            continue
        if option == "-p":
            plugin = next(given, "")
            if plugin.partition(".")[0] not in _SPREADING_PLUGINS:
                kept += [option, plugin]
            continue
        kept.append(option)
    return kept


class DebuggerError(PdbgymError):
    """The pdb session could not be started or used."""


@dataclass
class PdbReply:
    """What one command produced. ``output`` is bounded like ``RunResult.output``, prompt stripped."""

    output: str
    interrupted: bool = False  # the command ran too long and SIGINT brought us back to a prompt
    restarted: bool = False  # the session was restarted (program ended, quit, or interrupt failed)
    program_ended: bool = False  # the debuggee finished (test passed/failed); session restarted
    note: str = ""  # human-readable explanation of the above, for the observation
    exit_status: int | None = None  # pytest's exit status when the program finished by itself
    timed_out: bool = False  # the command reached its time limit (then SIGINT stopped it, or the session restarted)


@dataclass
class _Outcome:
    record: LauncherRecord | None = None
    output: str = ""
    exited: bool = False  # the process closed its terminal without an "ended" record
    timed_out: bool = False


class PdbSession:
    """pdb on ``test_node`` (e.g. ``tests/test_calc.py::test_add``) run by pytest in ``workspace``."""

    def __init__(
        self,
        sandbox: Sandbox,
        workspace: Path,
        test_node: str,
        *,
        python: str = sys.executable,
        limits: Limits = Limits(wall_time_s=3600),
        command_timeout_s: float = 10.0,
        keep_spare: bool = True,
        zygote: Zygote | None = None,
        pytest_args: Sequence[str] = (),
        import_roots: Sequence[str] = (),
    ) -> None:
        self.sandbox = sandbox
        self.workspace = Path(workspace).resolve()
        self.test_node = test_node
        self.python = python
        self.limits = limits
        self.command_timeout_s = command_timeout_s
        self.keep_spare = keep_spare  # a pre-started process makes restarts take milliseconds
        # A pytest fork server whose sandbox holds the workspace: each start is a fork of its warm
        # interpreter (no spare needed); None, or once it fails, a fresh process per start.
        self.zygote = zygote
        # The task's own pytest options (its ``test_command``: ``-o pythonpath=src``, ``--noconftest``...),
        # before the session's, so the run under pdb is the run that is graded; options that would spread
        # the test over workers are left out.
        self.pytest_args = session_options(pytest_args)
        # Repo-relative folders the project's code is imported from besides the root (a src layout),
        # first on the session's path as they are in the graded run.
        self.import_roots = [str(self.workspace / rel) for rel in import_roots if rel not in ("", ".")]
        test_file = test_node.split("::", 1)[0]
        if not (self.workspace / test_file).is_file():
            raise DebuggerError(
                f"test node {test_node!r}: file {test_file!r} does not exist in {self.workspace}; "
                "give a repo-relative node such as tests/test_x.py::test_y"
            )
        self.last_start_output = ""
        self._process: PtyTerminal | None = None
        self._spare: PtyTerminal | None = None
        self._scanner: RecordScanner | None = None
        self._inner_pid: int | None = None
        self._started_at = 0.0
        self._live: dict[int, tuple[Breakpoint, int]] = {}  # pdb number -> (as pdb has it, edits seen)
        self._edits: list[Edit] = []

    # ----- public interface -------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.alive

    @property
    def breakpoints(self) -> list[Breakpoint]:
        """The agent's breakpoints in the current file contents (recorded edits applied)."""
        return self._shifted()

    def start(self) -> str:
        """Start pdb on the test and return its output up to the first prompt."""
        if self.alive:
            raise DebuggerError("the pdb session is already running; use restart() to start it again")
        self.last_start_output = self._spawn([])
        return self.last_start_output

    def send(self, command: str, timeout_s: float | None = None) -> PdbReply:
        """Send one pdb command and return what it printed, interrupting it after ``timeout_s``."""
        if self._process is None:
            raise DebuggerError("the pdb session is not started; call start() first")
        if "\n" in command or "\r" in command:
            return PdbReply("*** pdbgym: send one pdb command per call (chain commands with ';;')")
        words = command.split(maxsplit=1)
        if words and words[0] in RESTART_COMMANDS:
            note = self.restart()
            return PdbReply(self.last_start_output, restarted=True,
                            note=f"'{words[0]}' restarts the session at a fresh first prompt. {note}")
        if not self.alive or time.monotonic() - self._started_at > self.limits.wall_time_s:
            why = "the debugger process had exited" if not self.alive else "the session hit its wall-time limit"
            note = self.restart()
            return PdbReply(self.last_start_output, restarted=True,
                            note=f"{why}; restarted at a fresh first prompt, command not run. {note}")
        self._process.write((command + "\n").encode())
        timeout = self.command_timeout_s if timeout_s is None else timeout_s
        outcome = self._await(timeout)
        if outcome.timed_out:
            return self._interrupt(outcome.output, timeout)
        return self._reply(outcome)

    def record_edit(self, path: str, first_line: int, last_line: int, new_line_count: int) -> None:
        """Note that lines ``first_line..last_line`` (1-based, inclusive) of repo-relative ``path`` were
        replaced by ``new_line_count`` lines. Breakpoints move accordingly at the next ``restart``."""
        if first_line < 1 or last_line < first_line - 1 or new_line_count < 0:
            raise DebuggerError(
                f"record_edit({path!r}, {first_line}, {last_line}, {new_line_count}): lines are 1-based, "
                "last_line >= first_line - 1 (first_line - 1 means a pure insertion), new_line_count >= 0"
            )
        self._edits.append(Edit(self._relative(path), first_line, last_line, new_line_count))

    def restart(self) -> str:
        """Start a fresh debugger process with the breakpoints, shifted by recorded edits.

        Returns a note of what was re-applied and what was dropped; the new first prompt's output is
        in ``last_start_output``.
        """
        kept = self.breakpoints
        dropped_or_moved = self._changes()
        retiring = self._process
        if retiring is not None:
            retiring.kill()
        self._edits.clear()
        self.last_start_output = self._spawn(kept, retiring)
        return _restart_note(kept, dropped_or_moved)

    def close(self) -> None:
        """Kill the debugger's whole process tree (and the spare's) and reap them. Safe to call twice."""
        self._terminate()
        if self._spare is not None:
            self._spare.close()
            self._spare = None

    def __enter__(self) -> PdbSession:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ----- process lifecycle ------------------------------------------------------------------

    def _launch(self, spare: bool) -> PtyTerminal:
        """Start a launcher process; it waits for the handshake (a spare imports pytest first). From the
        fork server, when there is one: a child that already has pytest, and so answers as a spare."""
        # breakpoint() in the project stops in this session's debugger, not a nested one.
        env = sandbox_env(self.workspace, {"PYTHONBREAKPOINT": "__main__.breakpoint_hook"})
        if self.import_roots:
            env["PYTHONPATH"] = os.pathsep.join([str(self.workspace), *self.import_roots])
        flags = [*self.pytest_args, *PYTEST_FLAGS, self.test_node]
        if self.zygote is not None:
            try:
                return self.zygote.spawn_pty(["--spare", *flags], self.workspace, env)
            except ZygoteError:
                self.zygote = None  # gone or refusing: fresh processes from now on
        argv = [self.python, "-P", str(LAUNCHER), *(["--spare"] if spare else []), *flags]
        return self.sandbox.spawn_pty(argv, self.workspace, self.limits, env)

    def _spawn(self, breakpoints: list[Breakpoint], retiring: PtyTerminal | None = None) -> str:
        """Hand the breakpoints to the spare (or a cold process) and return its first prompt's output.

        ``retiring`` (the previous process, already killed) is reaped while the new one starts up.
        """
        process, self._spare = self._spare, None
        if process is None or not process.alive:
            if process is not None:
                process.close()
            process = self._launch(spare=False)
        outcome = self._handshake(process, breakpoints, retiring)
        if outcome.record is not None and outcome.record.get("kind") == "stale":
            # The project shadows a module the spare (or the fork server) imported; every spare would be
            # stale likewise.
            self.keep_spare = False
            self.zygote = None
            self.close()
            outcome = self._handshake(self._launch(spare=False), breakpoints)
        if outcome.record is None or outcome.record["kind"] != "prompt":
            self._terminate()
            raise DebuggerError(
                f"pdb did not reach its first prompt for {self.test_node!r} with {self.python}; "
                f"check that pytest is installed for that interpreter. Output:\n{outcome.output}"
            )
        self._update_breakpoints(outcome.record)
        return outcome.output

    def _handshake(
        self, process: PtyTerminal, breakpoints: list[Breakpoint], retiring: PtyTerminal | None = None
    ) -> _Outcome:
        """Send the handshake, reap the retiring process meanwhile, then start the next spare."""
        nonce = secrets.token_hex(12)
        self._process = process
        self._scanner = RecordScanner(nonce, self.limits.output_limit_bytes)
        self._inner_pid = None
        self._live = {}
        self._started_at = time.monotonic()
        handshake = {"nonce": nonce, "breakpoints": [self._launcher_spec(bp) for bp in breakpoints]}
        process.write((json.dumps(handshake) + "\n").encode())
        if retiring is not None:
            retiring.close()
        outcome = self._await(max(STARTUP_TIMEOUT_S, self.command_timeout_s))
        # Only now: a spare importing pytest would compete for the CPU with this process's start-up. A fork
        # server needs none: its next child is as quick.
        if self.keep_spare and self.zygote is None and self._spare is None and outcome.record \
                and outcome.record.get("kind") == "prompt":
            self._spare = self._launch(spare=True)
        return outcome

    def _terminate(self) -> None:
        if self._process is not None:
            self._process.close()

    def _await(self, timeout_s: float) -> _Outcome:
        """Read until a record, the process's end, or ``timeout_s`` seconds of the debugger's own time:
        the wall clock less what its processes waited for a CPU (``pdbgym.sandbox.cpuwait``), so a command
        is cut at the same point of its work on a loaded host as on an idle one."""
        assert self._process is not None and self._scanner is not None
        clock = CommandClock(self._process.pid, timeout_s)
        record = self._scanner.next_record()
        outcome = _Outcome()
        while record is None:
            remaining = clock.remaining()
            if remaining <= 0:
                outcome.timed_out = True
                break
            data = self._process.read(remaining)
            if data is None:
                self._scanner.flush()
                outcome.exited = True
                break
            record = self._scanner.feed(data)
        outcome.record = record
        outcome.output, _ = self._scanner.take_output()
        return outcome

    # ----- replies ----------------------------------------------------------------------------

    def _reply(self, outcome: _Outcome, interrupted: bool = False, note: str = "") -> PdbReply:
        record = outcome.record
        if record is not None and record["kind"] == "prompt":
            self._update_breakpoints(record)
            return PdbReply(outcome.output, interrupted=interrupted, note=note)
        if record is not None and record.get("reason") == "quit":
            why = "pdb quit"
        elif record is not None:
            why = f"The program finished ({_describe_status(record)})"
        else:
            returncode = self._process.close() if self._process is not None else None
            why = f"The debugger process exited unexpectedly ({_describe_returncode(returncode)})"
        restart_note = self.restart()
        return PdbReply(
            output=f"{outcome.output}\n{self.last_start_output}" if outcome.output else self.last_start_output,
            interrupted=interrupted, restarted=True, program_ended=why != "pdb quit",
            note=f"{note}{why}; the session was restarted at a fresh first prompt. {restart_note}".strip(),
            exit_status=status if record is not None and isinstance(status := record.get("status"), int) else None,
        )

    def _interrupt(self, output_so_far: str, timeout_s: float) -> PdbReply:
        assert self._process is not None
        if self._inner_pid is None:
            self._inner_pid = self._process.find_process(str(LAUNCHER))
        outputs = [output_so_far]
        for attempt in range(2):  # the second SIGINT raises KeyboardInterrupt (blocked in a C call)
            if self._inner_pid is None or not self._process.signal_process(self._inner_pid, signal.SIGINT):
                break
            outcome = self._await(INTERRUPT_GRACE_S)
            outputs.append(outcome.output)
            if not outcome.timed_out:
                outcome.output = "".join(outputs)
                how = "SIGINT" if attempt == 0 else "a second SIGINT (KeyboardInterrupt)"
                reply = self._reply(outcome, interrupted=True,
                                    note=f"The command ran longer than {timeout_s:g} s; {how} interrupted it. ")
                reply.timed_out = True
                return reply
        restart_note = self.restart()
        return PdbReply(
            output="".join(outputs) + "\n" + self.last_start_output, restarted=True, timed_out=True,
            note=(f"The command ran longer than {timeout_s:g} s and did not stop on SIGINT within "
                  f"{2 * INTERRUPT_GRACE_S:g} s; the session was restarted at a fresh first prompt "
                  f"(program state lost). {restart_note}"),
        )

    # ----- breakpoints ------------------------------------------------------------------------

    def _update_breakpoints(self, record: PromptRecord) -> None:
        live: dict[int, tuple[Breakpoint, int]] = {}
        for entry in record.get("breakpoints", []):
            number = int(entry["number"])
            edits_seen = self._live[number][1] if number in self._live else len(self._edits)
            breakpoint_ = Breakpoint(
                file=self._relative(entry["file"]), line=int(entry["line"]), condition=entry.get("condition"),
                enabled=bool(entry.get("enabled", True)), temporary=bool(entry.get("temporary", False)),
                funcname=entry.get("funcname"),
            )
            live[number] = (breakpoint_, edits_seen)
        self._live = live

    def _shifted(self) -> list[Breakpoint]:
        """Each live breakpoint that survives the recorded edits, in current file contents.

        A breakpoint set after an edit already refers to the edited file (pdb read it fresh), so only
        the edits recorded before pdb first reported it apply.
        """
        result = []
        for breakpoint_, edits_seen in self._live.values():
            kept, _ = shift_breakpoints([breakpoint_], self._edits[edits_seen:])
            result.extend(kept)
        return result

    def _changes(self) -> list[tuple[Breakpoint, Breakpoint | None]]:
        changes = []
        for breakpoint_, edits_seen in self._live.values():
            _, changed = shift_breakpoints([breakpoint_], self._edits[edits_seen:])
            changes.extend(changed)
        return changes

    def _relative(self, path: str) -> str:
        candidate = Path(path)
        if not candidate.is_absolute():
            return candidate.as_posix()
        try:
            return candidate.resolve().relative_to(self.workspace).as_posix()
        except ValueError:
            return str(candidate)

    def _launcher_spec(self, breakpoint_: Breakpoint) -> BreakpointSpec:
        file = Path(breakpoint_.file)
        return {
            "file": str(file if file.is_absolute() else self.workspace / file), "line": breakpoint_.line,
            "condition": breakpoint_.condition, "enabled": breakpoint_.enabled,
            "temporary": breakpoint_.temporary, "funcname": breakpoint_.funcname,
        }


def _restart_note(kept: list[Breakpoint], changes: list[tuple[Breakpoint, Breakpoint | None]]) -> str:
    parts = []
    if kept:
        parts.append("Breakpoints re-applied: " + "; ".join(bp.describe() for bp in kept) + ".")
    moved = [f"{before.file}:{before.line} -> line {after.line}" for before, after in changes if after]
    dropped = [before.describe() for before, after in changes if after is None]
    if moved:
        parts.append("Moved by edits: " + "; ".join(moved) + ".")
    if dropped:
        parts.append("Dropped (their lines were removed by edits): " + "; ".join(dropped) + ".")
    return " ".join(parts)


def _describe_status(record: LauncherRecord) -> str:
    status = record.get("status")
    if record.get("reason") == "exception":
        return "the debugged program crashed"
    meanings = {0: "tests passed", 1: "tests failed", 2: "interrupted", 4: "usage error", 5: "no tests ran"}
    meaning = meanings.get(status, "see output") if isinstance(status, int) else "see output"
    return f"pytest exit status {status}: {meaning}"


def _describe_returncode(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"
