"""The environment end to end: real sandbox, real pdb, real pytest runs on a tiny task."""

import json
import time

import pytest

from pdbgym.agent.play import play_policy
from pdbgym.agent.scripted import ScriptedPolicy, scripted_actions
from pdbgym.env import Action, DebugEnv, EnvConfig, tool_specs


def test_scripted_policy_solves_and_writes_transcript(tiny_task, tmp_path):
    result = play_policy(tiny_task, ScriptedPolicy(tiny_task), transcript_path=tmp_path / "t.json")
    assert result.termination_reason == "solved"
    assert result.final_test_passed is True
    assert result.actions_used == len(list(scripted_actions(tiny_task)))
    transcript = json.loads((tmp_path / "t.json").read_text())
    assert transcript["env"]["result"]["final_test_passed"] is True
    tools = [s["tool"] for s in transcript["env"]["steps"]]
    assert tools[0] == "pdb" and tools[-1] == "submit" and "edit" in tools
    assert transcript["env"]["result"]["grading"]["FAIL_TO_PASS"] == {"tests/test_ops.py::test_sub": "passed"}


def test_pdb_tool_answers_and_breakpoint_stops_in_buggy_frame(tiny_task):
    with DebugEnv(tiny_task) as env:
        first = env.reset()
        assert "tests/test_ops.py::test_sub" in first
        obs, done, _ = env.step(Action("pdb", {"command": "p 1 + 1"}))
        assert obs.strip().endswith("2") and not done
        env.step(Action("pdb", {"command": "b calc/ops.py:6"}))
        obs, _, _ = env.step(Action("pdb", {"command": "c"}))
        assert "ops.py" in obs
        obs, _, _ = env.step(Action("pdb", {"command": "p (a, b)"}))
        assert "(5, 3)" in obs


def test_submit_without_fix_is_unresolved(tiny_task):
    with DebugEnv(tiny_task) as env:
        env.reset()
        obs, done, info = env.step(Action("submit"))
    assert done and info["termination_reason"] == "finish_unresolved"
    assert info["final_test_passed"] is False
    assert "failed" in obs


def test_editing_the_test_does_not_count(tiny_task):
    with DebugEnv(tiny_task) as env:
        env.reset()
        obs, _, _ = env.step(Action("edit", {"path": "tests/test_ops.py", "old": "== 2", "new": "== 8"}))
        obs, _, _ = env.step(Action("run_tests"))
        assert "1/1 passed" in obs  # the agent's own copy now passes...
        _, done, info = env.step(Action("submit"))
    assert done and info["final_test_passed"] is False  # ...but grading restores the pristine test


def test_edit_restarts_session_and_run_tests_reports(tiny_task):
    with DebugEnv(tiny_task) as env:
        env.reset()
        obs, _, _ = env.step(Action("edit", {"path": "calc/ops.py", "start": 6, "end": 6,
                                             "new_text": "    return a - b\n"}))
        assert "return a - b" in obs and "restarted" in obs
        obs, _, _ = env.step(Action("run_tests", {"which": "all"}))
        assert obs.startswith("2/2 passed")
        _, done, info = env.step(Action("submit"))
    assert info["termination_reason"] == "solved"


def test_turn_budget_ends_episode_and_still_grades(tiny_task):
    with DebugEnv(tiny_task, EnvConfig(turn_budget=2)) as env:
        env.reset()
        _, done, _ = env.step(Action("view", {"path": "calc/ops.py"}))
        assert not done
        obs, done, info = env.step(Action("view", {"path": "."}))
        assert done and info["termination_reason"] == "budget"
        assert "turn budget" in obs
        assert env.step(Action("view", {"path": "."})).observation == "The episode is over."
        assert env.result.actions_used == 2


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ({"tool": "teleport", "args": {}}, "unknown tool 'teleport'"),
        ({"tool": "pdb", "args": {}}, "needs argument 'command'"),
        ({"tool": "view", "args": {"path": 3}}, "must be string"),
        ({"tool": "view", "args": {"path": "../../etc/passwd"}}, "outside the project"),
        ({"tool": "view", "args": {"path": "/etc/passwd"}}, "outside the project"),
        ({"tool": "view", "args": {"path": "nope.py"}}, "no such file"),
        ({"tool": "edit", "args": {"path": "calc/ops.py", "old": "zzz", "new": "y"}}, "does not occur"),
        ({"tool": "edit", "args": {"path": "calc/ops.py", "start": 50, "end": 60, "new_text": "x"}}, "not inside"),
        ({"tool": "edit", "args": {"path": "../x.py", "start": 1, "end": 1, "new_text": "x"}}, "outside the project"),
        ({"tool": "edit", "args": {"path": "calc/ops.py", "start": 1}}, "needs ['end', 'new_text']"),
        ({"tool": "run_tests", "args": {"which": "some"}}, "must be one of"),
        ({"tool": "submit", "args": {"now": True}}, "has no argument"),
        ("not an action", "an action must be"),
    ],
)
def test_bad_actions_get_clear_observations_and_episode_goes_on(tiny_task, action, expected):
    with DebugEnv(tiny_task) as env:
        env.reset()
        obs, done, _ = env.step(action)
        assert expected in obs and obs.startswith("Error:")
        assert not done
        obs, _, _ = env.step(Action("pdb", {"command": "p 40 + 2"}))
        assert "42" in obs


def test_bad_pdb_syntax_is_reported_by_pdb(tiny_task):
    with DebugEnv(tiny_task) as env:
        env.reset()
        obs, done, _ = env.step(Action("pdb", {"command": "p (1 +"}))
        assert "SyntaxError" in obs and not done
        assert "3" in env.step(Action("pdb", {"command": "p 1 + 2"})).observation


def test_tool_specs_are_openai_functions():
    specs = tool_specs()
    assert {s["function"]["name"] for s in specs} == {"pdb", "view", "edit", "run_tests", "submit"}
    for spec in specs:
        assert spec["type"] == "function"
        assert spec["function"]["parameters"]["type"] == "object"


class _PolicyWhoseInputEnds:
    name = "human"

    def reset(self, task, observation):
        pass

    def next_action(self, observation):
        raise EOFError  # what input() raises when the terminal's input ends (Ctrl-D)


def test_policy_failure_ends_as_other_and_keeps_the_transcript(tiny_task, tmp_path):
    result = play_policy(tiny_task, _PolicyWhoseInputEnds(), transcript_path=tmp_path / "t.json")
    assert result.termination_reason == "other" and not result.final_test_passed
    assert "EOFError" in result.detail
    transcript = json.loads((tmp_path / "t.json").read_text())
    assert transcript["env"]["result"]["termination_reason"] == "other"


FORGER = """\
import atexit, glob, json, os

def _forge():
    paths = glob.glob(".pdbgym-report-*.json") + [os.environ.get("PDBGYM_REPORT", "/nonexistent/report")]
    for path in paths:
        try:
            with open(path, "w") as fh:
                json.dump({"outcomes": {node: "passed" for node in %r}}, fh)
        except OSError:
            pass

atexit.register(_forge)
"""


def test_project_code_cannot_forge_the_grading_report_at_exit(tiny_task):
    # Through pdb the agent can write any file; a sitecustomize.py runs in every test process.
    forger = FORGER % (tiny_task.all_tests,)
    with DebugEnv(tiny_task) as env:
        env.reset()
        env.step(Action("pdb", {"command": f"!open('sitecustomize.py', 'w').write({forger!r})"}))
        assert (env.ws / "sitecustomize.py").is_file()
        _, done, info = env.step(Action("submit"))
    assert done and info["termination_reason"] == "finish_unresolved" and not info["final_test_passed"]


def test_a_debugger_that_died_restarts_with_its_breakpoints_and_nothing_left_running(tiny_task):
    with DebugEnv(tiny_task) as env:
        env.reset()
        env.step(Action("pdb", {"command": "b calc/ops.py:6"}))
        session = env.session
        dead = session._process
        dead.kill()  # the debugger died between two commands (killed, out of memory, ...)
        deadline = time.monotonic() + 10
        while dead.alive and time.monotonic() < deadline:
            time.sleep(0.01)
        obs, done, _ = env.step(Action("pdb", {"command": "c"}))
        assert not done and "restarted" in obs and "calc/ops.py:6" in obs
        assert env.session is session  # the same session: no second one whose spare process would leak
        env.step(Action("pdb", {"command": "c"}))  # the restart did not run the command; the breakpoint holds
        assert "(5, 3)" in env.step(Action("pdb", {"command": "p (a, b)"})).observation
