"""``DebugEnv``: a failing test, a live pdb session on it, file tools, and honest grading.

Gym-like: ``reset() -> observation``; ``step(action) -> StepResult(observation, done, info)``.
"""

from __future__ import annotations

import os
import stat
import time
import traceback
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from pdbgym.defaults import documented
from pdbgym.env import files, zygotes
from pdbgym.env.tools import Action, ActionError, StepInfo, StepResult, ToolArgs, check_args
from pdbgym.episode_defaults import EPISODE, check_setting
from pdbgym.errors import PdbgymError
from pdbgym.fileio import JSONValue, write_json_atomic
from pdbgym.grading.grader import GradeResult, GradingDict, agent_lines, grade, grading_preview
from pdbgym.grading.testrun import run_tests
from pdbgym.sandbox import Sandbox, Workspace, get_sandbox
from pdbgym.sandbox.diskguard import EXTRA_BYTES, EXTRA_FILES, DiskGuard
from pdbgym.sandbox.zygote import Zygote, ZygoteError
from pdbgym.tasks.model import Task
from pdbgym.tasks.taskenv import task_sandbox, task_session
from pdbgym.tasks.wrongsite import WrongSiteOutcome, wrong_site_outcome
from pdbgym.termination import TERMINATION_REASONS


@dataclass
class EnvConfig:
    """Episode settings. ``turn_budget`` counts every step, malformed ones included.

    The fields with a flag are ``pdbgym run``'s (``pdbgym.agent.play.RunConfig.env``, flattened by
    ``pdbgym.commandapp.config_command``), with the help declared here; the rest are for library callers.
    """

    # pdbgym.episode_defaults: every command's default
    turn_budget: int = documented(EPISODE.turn_budget, "Tool calls per episode before 'budget'",
                                  old_flags=("--budget",))
    command_timeout_s: float = documented(10.0, "Seconds before a pdb command is interrupted")
    sandbox: str = documented("auto", "auto, bwrap or plain")  # "auto": bwrap when available
    observation_max_chars: int = documented(12_000, "longer observations keep a head and a tail", cli=False)
    start_debugger: bool = documented(True, "start the pdb session at reset", cli=False)
    workspace_parent: str | None = documented(None, "folder the workspace is made in (None: the temp folder)",
                                              cli=False)
    # Host disk the agent's commands may add to the workspace, over the task's repo as copied: allocated
    # bytes, and files and folders. Past it they are stopped and the agent told (docs/sandbox.md, "Host disk").
    workspace_extra_bytes: int = documented(EXTRA_BYTES, "bytes the agent may add to the workspace", cli=False)
    workspace_extra_files: int = documented(EXTRA_FILES, "files and folders the agent may add", cli=False)
    disk_poll_s: float = documented(0.2, "how often the workspace's usage is measured (longer for a large tree)",
                                    cli=False)
    # A pytest fork server (docs/sandbox.md, "The pytest fork server") under bwrap: the pdb session, the
    # agent's test runs and grading fork from one warm interpreter instead of each starting Python and
    # pytest. Off: a fresh interpreter per run, as before.
    zygote: bool = documented(True, "pdb sessions and test runs fork from a pytest fork server", cli=False)

    def __post_init__(self) -> None:
        check_setting("turn_budget", self.turn_budget)  # EpisodeSettings' rule: a budget of 0 plays nothing


class EpisodeResultDict(TypedDict):
    """``EpisodeResult.to_dict()``: the transcript's ``result``."""

    instance_id: str
    termination_reason: str
    final_test_passed: bool
    actions_used: int
    duration_s: float
    detail: str
    grading: GradingDict
    wrong_site: WrongSiteOutcome | None
    commands_cut: int


class StepRecord(TypedDict):
    """One step of the transcript: its number, the action as given (absent when it was no action at all),
    what was wrong with it, the observation and how long the step took."""

    index: int
    tool: NotRequired[str]
    args: NotRequired[dict[str, JSONValue]]
    error: NotRequired[str]
    observation: NotRequired[str]
    duration_s: NotRequired[float]


class SandboxInfo(TypedDict):
    backend: str
    isolated: bool


class Transcript(TypedDict):
    """What ``DebugEnv.write_transcript`` writes: the task, the env's settings (``asdict(EnvConfig)``), the
    sandbox, the first observation, every step and the result (None while the episode runs)."""

    instance_id: str
    task_path: str
    config: dict[str, object]
    sandbox: SandboxInfo
    initial_observation: str
    steps: list[StepRecord]
    result: EpisodeResultDict | None


@dataclass
class EpisodeResult:
    instance_id: str
    termination_reason: str
    final_test_passed: bool
    actions_used: int
    duration_s: float
    detail: str = ""
    grading: GradingDict = field(default_factory=lambda: GradingDict())  # {}: never graded
    # Tasks with wrong-site information only: {"touched", "sites", "touched_sites"} of the final edits
    # (pdbgym.tasks.wrongsite); None for tasks without it or an episode that never had a workspace.
    wrong_site: WrongSiteOutcome | None = None
    # pdb commands that reached their time limit (``command_timeout_s`` of the session's own time) and were cut
    commands_cut: int = 0

    @property
    def wrong_site_touched(self) -> bool | None:
        """Whether the final edits touched the task's known wrong site; None when the task has no such site."""
        touched = None if self.wrong_site is None else self.wrong_site.get("touched")
        return None if touched is None else bool(touched)

    def to_dict(self) -> EpisodeResultDict:
        return cast(EpisodeResultDict, asdict(self))  # asdict's copy of exactly these fields


def bound_text(text: str, limit: int) -> str:
    """Keep a head and a tail of ``text`` with a note of how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def initial_observation(task: Task, debugger_note: str) -> str:
    """What ``reset`` returns: the task statement, the failing tests, then ``debugger_note`` (the pdb session's
    first output). With ``""`` for the note it is the part known before any session starts (the context check
    of ``pdbgym.agent.room`` measures that)."""
    return (f"{task.statement()}\n\nThe project is in the current folder. Failing test(s): "
            f"{', '.join(task.FAIL_TO_PASS)}\n\n{debugger_note}")


class DebugEnv:
    def __init__(self, task: Task, config: EnvConfig | None = None, sandbox: Sandbox | None = None) -> None:
        self.task = task
        self.config = config or EnvConfig()
        # The task's environment mounted (built on the host first when not in the cache).
        self.sandbox = task_sandbox(sandbox or get_sandbox(self.config.sandbox), task)
        self.workspace: Workspace | None = None
        self.session = None
        self.result: EpisodeResult | None = None
        self.actions_used = 0
        self.commands_cut = 0  # pdb commands cut by their time limit this episode
        self._steps: list[StepRecord] = []
        self._initial_observation = ""
        self._started = 0.0
        self._disk: DiskGuard | None = None
        self._zygote: Zygote | None = None
        self._ws_identity: tuple[int, int] | None = None
        self._ws_fd: int | None = None  # the workspace folder, held open (O_PATH) for the host's file tools

    # -- lifecycle -------------------------------------------------------------------------------

    def reset(self) -> str:
        self.close()
        self.result, self.actions_used, self.commands_cut, self._steps = None, 0, 0, []
        self._started = time.perf_counter()
        parent = Path(self.config.workspace_parent) if self.config.workspace_parent else None
        if self.config.zygote:
            self._zygote = zygotes.acquire(self.sandbox, parent)
        if self._zygote is not None:
            self.workspace = Workspace.create(self.task.repo, self._zygote.folder, in_owned=True)
        else:
            self.workspace = Workspace.create(self.task.repo, parent)
        self._ws_fd = os.open(self.ws, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self._ws_identity = self._identity()
        if self._zygote is not None:
            self._zygote.serve_workspace(self.workspace.path)
        self._disk = DiskGuard(self.ws, self.config.workspace_extra_bytes, self.config.workspace_extra_files,
                               self.config.disk_poll_s)
        debugger_note = self._start_session() if self.config.start_debugger else "(no debugger session)"
        self._initial_observation = initial_observation(self.task, debugger_note)
        return self._initial_observation

    def _start_session(self) -> str:
        node = self.task.FAIL_TO_PASS[0]
        try:
            self.session = task_session(self.task, self.sandbox, self.ws, node,
                                        command_timeout_s=self.config.command_timeout_s, zygote=self._zygote)
            output = self.session.start()
        except PdbgymError as exc:
            self.session = None
            return f"The pdb session could not start: {exc}\nIt will be retried on the next pdb command."
        return f"A pdb session is stopped at the start of test {node}:\n{output}"

    @property
    def ws(self) -> Path:
        if self.workspace is None:
            raise PdbgymError("call reset() before step()")
        return self.workspace.path

    def close(self) -> None:
        self._stop_disk_guard()
        if self.session is not None:
            self.session.close()
            self.session = None
        if self._ws_fd is not None:
            os.close(self._ws_fd)
            self._ws_fd = None
        if self.workspace is not None:
            self.workspace.cleanup()
            self.workspace = None
        if self._zygote is not None:
            parent = Path(self.config.workspace_parent) if self.config.workspace_parent else None
            zygotes.release(self._zygote, parent)
            self._zygote = None

    def __enter__(self) -> DebugEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- stepping ------------------------------------------------------------------------------

    def step(self, action: Action | Mapping[str, JSONValue]) -> StepResult:
        if self.result is not None:
            return StepResult("The episode is over.", True, self._info())
        started = time.perf_counter()
        self.actions_used += 1
        record: StepRecord = {"index": self.actions_used}
        done = False
        try:
            action = Action.coerce(action)
            record["tool"], record["args"] = action.tool, action.args
            moved = self._workspace_moved()  # by a process the agent left running, since the last step
            observation, done = ("", False) if moved else self._dispatch(action.tool, check_args(action))
            moved = moved or (None if done else self._workspace_moved())
            if moved:  # what the action saw may be what the agent swapped in: none of it is shown
                self._finish("tampered", moved, grade_workspace=False)
                observation, done = f"{moved}: graded unsolved. The episode ends.", True
        except ActionError as exc:
            observation = f"Error: {exc}"
            record["error"] = str(exc)
        except (PdbgymError, OSError) as exc:
            observation = f"Error: {exc}"
            record["error"] = str(exc)
        except Exception as exc:  # an environment fault ends only this episode, with the reason kept
            record["error"] = traceback.format_exc()
            self._finish("other", f"internal error: {exc!r}")
            observation, done = f"The environment failed: {exc!r}. The episode ends.", True
        if not done and self._disk is not None:
            try:
                note, ending = self._disk.after_step()
            except OSError as exc:  # the workspace went from under the walk: moved now, or another fault
                note, ending = "", self._workspace_moved() or f"the disk cap's check of the workspace failed: {exc}"
            observation += f"\n\n{note}" if note else ""
            if ending is not None:
                self._finish("other", ending)
                observation += " The episode ends."
                done = True
            elif note and self.session is not None and not self.session.alive:
                self._restart_stopped_session()
        if not done and self.actions_used >= self.config.turn_budget:
            self._finish("budget", f"turn budget of {self.config.turn_budget} used")
            observation += f"\n\nThe turn budget ({self.config.turn_budget}) is used up; the episode ends."
            done = True
        observation = bound_text(observation, self.config.observation_max_chars)
        record["observation"], record["duration_s"] = observation, round(time.perf_counter() - started, 4)
        self._steps.append(record)
        return StepResult(observation, done, self._info())

    def _held(self) -> Path:
        """The workspace as the folder held open since ``reset``: what the host's file tools read and write
        through. A path swapped for a link, or another folder, between the episode's checks of it is not
        followed; the checks end the episode either way."""
        return Path(f"/proc/self/fd/{self._ws_fd}") if self._ws_fd is not None else self.ws

    def _identity(self) -> tuple[int, int] | None:
        """The workspace folder's (device, inode), or None where its path no longer names a folder."""
        try:
            info = os.lstat(self.ws)
        except OSError:
            return None
        return (info.st_dev, info.st_ino) if stat.S_ISDIR(info.st_mode) else None

    def _workspace_moved(self) -> str | None:
        """Why the episode cannot go on in its workspace, or None. On the fork server the workspace sits in
        the server's writable folder, so the agent's code can rename it or put another folder or a link
        in its place; every later use of the path on the host (edits, the disk cap's walk, grading) would
        then read what the agent chose, and a missing one raised out of ``step``."""
        if self._ws_identity is None or self._identity() == self._ws_identity:
            return None
        return f"the workspace folder {self.ws} was moved, removed or replaced during the episode"

    def _dispatch(self, tool: str, args: ToolArgs) -> tuple[str, bool]:
        if tool == "pdb":
            return self._pdb(args["command"]), False
        if tool == "view":
            return files.view(self._held(), args["path"], args.get("start"), args.get("end")), False
        if tool == "edit":
            return self._edit(args), False
        if tool == "run_tests":
            nodes = self.task.all_tests if args.get("which") == "all" else self.task.FAIL_TO_PASS
            return self._run_tests(nodes), False
        if tool == "submit":
            result = self._finish_graded("submitted")
            verdict = "All tests pass." if result.final_test_passed else "Some tests still fail."
            return f"Submitted. {verdict}\n{self._grading_summary()}", True
        raise ActionError(f"unknown tool '{tool}'")

    def _run_tests(self, nodes: list[str]) -> str:
        """The agent's own run, in its workspace, through the hardened runner. What it shows is for the
        agent's information only: the episode's result always comes from a fresh grading run."""
        plan, screened = grading_preview(self.task, self.ws)
        # Every file the agent changed, taken by grading or not, is the agent's code in this run.
        written = agent_lines(self.task.repo, self.ws, [*plan.changed, *plan.ignored])
        run = run_tests(self.sandbox, self.ws, self.task, nodes, agent_lines=written, zygote=self._zygote)
        text = f"{run.summary(nodes)}\n\npytest output:\n{bound_text(run.output, 4000)}"
        ignored = plan.ignored
        if screened:
            text += "\n\nGrading will call this episode TAMPERED (graded unsolved) for these changes:\n" + \
                "\n".join(f"  {why}" for why in screened[:10])
        if ignored:
            rows = [f"  {path}: {why}" for path, why in list(ignored.items())[:10]]
            text += "\n\nGrading will NOT take these files (it uses the original or leaves them out):\n" + "\n".join(rows)
        return text

    def _pdb(self, command: str) -> str:
        # A session whose process died is restarted by ``send`` itself, breakpoints kept; a new one is
        # made only when none could be started yet.
        if self.session is None:
            note = self._start_session()
            if self.session is None:
                return note
            prefix = "(The pdb session was not running and has been started again.)\n"
        else:
            prefix = ""
        reply = self.session.send(command)
        self.commands_cut += reply.timed_out
        parts = [prefix + reply.output.rstrip()]
        if reply.note:
            parts.append(f"[{reply.note}]")
        return "\n".join(p for p in parts if p)

    def _edit(self, args: ToolArgs) -> str:
        if "old" in args or "new" in args:
            if "old" not in args or "new" not in args or {"start", "end", "new_text"} & set(args):
                raise ActionError("edit takes either (path, old, new) or (path, start, end, new_text)")
            span = files.edit_string(self._held(), args["path"], args["old"], args["new"])
        else:
            missing = [k for k in ("start", "end", "new_text") if k not in args]
            if missing:
                raise ActionError(f"edit by line range needs {missing} (or give old and new instead)")
            span = files.edit_lines(self._held(), args["path"], args["start"], args["end"], args["new_text"])
        observation = f"Edited {span.path}:\n{files.numbered_excerpt(self._held(), span)}"
        if self.session is not None:
            self.session.record_edit(span.path, span.first, span.last, span.new_count)
            observation += f"\n\nThe pdb session restarted. {self.session.restart()}".rstrip()
        return observation

    # -- ending ----------------------------------------------------------------------------------

    def _finish_graded(self, how: str) -> EpisodeResult:
        self._stop_disk_guard()
        moved = self._settle()
        if moved:
            return self._finish("tampered", moved, grade_workspace=False)
        wrong_site = self._wrong_site()
        graded = grade(self.task, self.ws, self.sandbox)
        reason = "solved" if graded.final_test_passed else "finish_unresolved"
        return self._finish(reason, how, graded, wrong_site)

    def _settle(self) -> str | None:
        """End the agent's session and every process it started (the sweep), then say whether the workspace
        was moved meanwhile (``_workspace_moved``): after the sweep nothing moves it, so a workspace still in
        place is the one the agent left, and grading may read it."""
        self._close_session()
        self._end_agent_processes()
        return self._workspace_moved()

    def _wrong_site(self) -> WrongSiteOutcome | None:
        """Read from the workspace before grading, once the agent's processes are gone (``_settle``)."""
        return wrong_site_outcome(self.task, self.ws) if self.workspace is not None else None

    def _end_agent_processes(self) -> None:
        """Before grading reads the workspace: every process the agent started in the fork server's
        sandbox is killed (the sweep), so the change read is the one the agent left; a server whose sweep
        fails is stopped, which ends all it held. Grading itself never runs in that sandbox."""
        if self._zygote is None or not self._zygote.alive:
            return
        try:
            if self._zygote.sweep().get("ok"):
                return
        except ZygoteError:
            pass
        self._zygote.stop()

    def _finish(self, reason: str, detail: str, graded: GradeResult | None = None,
                wrong_site: WrongSiteOutcome | None = None, grade_workspace: bool = True) -> EpisodeResult:
        """End the episode; ungraded so far, it is graded now, unless ``grade_workspace`` is False (a
        workspace the agent moved: whatever sits at its path is the agent's choice, never graded)."""
        if reason not in TERMINATION_REASONS:
            raise PdbgymError(f"unknown termination reason '{reason}'; use one of {TERMINATION_REASONS}")
        self._stop_disk_guard()  # no command of the agent's runs from here on
        if not grade_workspace:
            self._settle()
        elif graded is None and self.workspace is not None:
            moved = self._settle()
            if moved:
                return self._finish("tampered", f"{detail}; {moved}", grade_workspace=False)
            wrong_site = self._wrong_site()
            try:
                graded = grade(self.task, self.ws, self.sandbox)
            except Exception as exc:  # grading itself failed: the episode still ends, unsolved, with the reason
                reason, detail = "other", f"{detail}; grading failed: {exc!r}"
        if graded is not None and graded.tampered:  # forgery overrides whatever else ended the episode
            reason, detail = "tampered", f"{detail}; grading saw forged test results: {graded.tampered[0]}"
        self.result = EpisodeResult(
            instance_id=self.task.instance_id,
            termination_reason=reason,
            final_test_passed=bool(graded and graded.final_test_passed),
            actions_used=self.actions_used,
            duration_s=round(time.perf_counter() - self._started, 3),
            detail=detail,
            grading=graded.to_dict() if graded else {},
            wrong_site=wrong_site,
            commands_cut=self.commands_cut,
        )
        self._close_session()
        return self.result

    def _restart_stopped_session(self) -> None:
        """Bring back a session the disk cap stopped after its command had answered, so the agent's next
        pdb command (deleting files, say) runs rather than meeting a dead session."""
        try:
            self.session.restart()  # type: ignore[union-attr]
        except PdbgymError:
            pass  # the next pdb command starts it again and says so

    def _stop_disk_guard(self) -> None:
        if self._disk is not None:
            self._disk.stop()
            self._disk = None

    def _close_session(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def terminate(self, reason: str, detail: str = "") -> EpisodeResult:
        """End the episode for a reason the agent loop decides (``ctx_overflow``, ``other``); grades it."""
        if self.result is None:
            self._finish(reason, detail)
        assert self.result is not None
        return self.result

    def _grading_summary(self) -> str:
        grading: GradingDict = self.result.grading if self.result else {}
        outcomes = (grading.get("FAIL_TO_PASS", {}), grading.get("PASS_TO_PASS", {}))
        rows = [f"  {o:>8}  {n}" for part in outcomes for n, o in part.items()]
        if grading.get("tampered"):
            rows.insert(0, "  TAMPERED: the test results were forged; graded unsolved: " + grading["tampered"][0])
        rows += [f"  ignored by grading: {path}: {why}" for path, why in list(grading.get("ignored_files", {}).items())[:10]]
        return "\n".join(rows)

    def _info(self) -> StepInfo:
        info: StepInfo = {"actions_used": self.actions_used}
        if self.result is not None:
            info["termination_reason"] = self.result.termination_reason
            info["final_test_passed"] = self.result.final_test_passed
        return info

    # -- transcript --------------------------------------------------------------------------------

    @property
    def transcript(self) -> Transcript:
        return {
            "instance_id": self.task.instance_id,
            "task_path": str(self.task.path),
            "config": asdict(self.config),
            "sandbox": {"backend": self.sandbox.name, "isolated": self.sandbox.isolated},
            "initial_observation": self._initial_observation,
            "steps": self._steps,
            "result": self.result.to_dict() if self.result else None,
        }

    def write_transcript(self, path: str | Path) -> Path:
        target = Path(path)
        write_json_atomic(target, self.transcript)
        return target
