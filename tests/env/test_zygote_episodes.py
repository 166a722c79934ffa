"""Episodes with the pytest fork server (``EnvConfig.zygote``, the default under bwrap).

The server holds the agent's pdb session and test runs; grading never forks from it, it runs in a fresh
sandbox with the whole tree read-only. So: every red-team attack made in an episode's workspace beside the
server ends unsolved; a workspace the agent moves, removes or replaces (the server's folder is writable)
ends the episode tampered and ungraded, and no host tool follows a link swapped in for it; what the
agent's session started is gone before grading reads the workspace; and the next episode on the same
server finds nothing of the last one.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_plain_zygote import FIX
from test_redteam import ATTACKS as GRADING_ATTACKS
from test_redteam import FAILING, TASK_ID, swap_tests_from_a_thread
from test_redteam_grading import ATTACKS as RUN_ATTACKS

from pdbgym.env import Action, DebugEnv, EnvConfig, zygotes
from pdbgym.grading.grader import grade
from pdbgym.sandbox import Workspace, get_sandbox
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason
from pdbgym.sandbox.zygote import Zygote
from pdbgym.tasks.model import load_task
from pdbgym.tasks.patches import apply_patch
from pdbgym.tasks.suites import resolve_tasks

from taskfixtures import make_task

needs_bwrap = pytest.mark.skipif(bwrap_unavailable_reason() is not None, reason=str(bwrap_unavailable_reason()))


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    server = Zygote(get_sandbox("bwrap"), zygotes.server_argv())
    server.wait_ready()
    yield server
    server.close()


@pytest.fixture(scope="module")
def task():
    return next(t for t in resolve_tasks("builtin") if t.instance_id == TASK_ID)


def _graded_beside(zygote: Zygote, task, attack):
    """Grade ``attack``'s workspace, made in the server's folder as an episode's is: grading must not fork
    from the server (it runs in a fresh sandbox the episode never touched)."""
    before = zygote.jobs_run
    with Workspace.create(task.repo, zygote.folder) as ws:
        attack(ws.path)
        graded = grade(task, ws.path, get_sandbox("bwrap"))
    assert zygote.jobs_run == before, "grading forked from the episode's server"
    return graded


@needs_bwrap
@pytest.mark.parametrize("name", [*GRADING_ATTACKS, *RUN_ATTACKS])
def test_every_red_team_attack_in_a_server_episode_is_not_solved(zygote, task, name):
    attack, expected = GRADING_ATTACKS[name] if name in GRADING_ATTACKS else (RUN_ATTACKS[name], "")
    graded = _graded_beside(zygote, task, attack)
    assert not graded.final_test_passed, f"{name}: graded solved\n{graded.output[-2000:]}"
    if expected == "tampered":
        assert graded.tampered, (name, graded.fail_to_pass, graded.output[-1500:])
    elif expected.startswith("ignored:"):
        assert expected.split(":", 1)[1] in graded.ignored_files, graded.ignored_files
    assert graded.fail_to_pass[FAILING] != "passed" or graded.tampered
    assert zygote.sweep()["ok"]


@needs_bwrap
def test_the_grading_tree_is_read_only_as_a_whole(zygote, task):
    """Every swap of a test file, folder or the tree itself is refused (EROFS), and nothing is flagged: the
    write simply cannot happen."""
    graded = _graded_beside(zygote, task, swap_tests_from_a_thread)
    assert not graded.final_test_passed and not graded.tampered, graded.tampered
    assert graded.fail_to_pass[FAILING] == "failed", (graded.fail_to_pass, graded.output[-1500:])
    for move in ("write", "rename", "move-folder"):
        assert f"swap {move} refused: EROFS" in graded.output, graded.output[-1500:]


@needs_bwrap
def test_a_task_whose_tests_write_into_the_project_fails_that_test_under_grading(zygote, tmp_path):
    """The grading tree is read-only as a whole: a test that writes into the project (tests should write to
    ``tmp_path``) fails there, once; no second run is chosen from what the run printed."""
    root = make_task(tmp_path / "writer")
    test = root / "repo" / "tests" / "test_ops.py"
    test.write_text(test.read_text() + "\n\ndef test_writes_a_report():\n"
                    "    open('report.txt', 'w').write(str(add(1, 1)))\n")
    task = load_task(root)
    task.PASS_TO_PASS.append("tests/test_ops.py::test_writes_a_report")
    graded = _graded_beside(zygote, task, lambda ws: apply_patch(ws, task.patch))
    assert not graded.final_test_passed and not graded.tampered and not graded.refused, graded.output[-1500:]
    assert graded.pass_to_pass["tests/test_ops.py::test_writes_a_report"] == "failed", graded.output[-1500:]
    assert "Read-only file system" in graded.output and graded.output.count(" passed in ") == 1


@needs_bwrap
def test_an_episode_on_the_server_grades_in_a_fresh_sandbox(tiny_task):
    with DebugEnv(tiny_task, EnvConfig(sandbox="bwrap")) as env:
        env.reset()
        server = env._zygote
        assert server is not None
        env.step(Action("edit", {"path": "calc/ops.py", "start": 6, "end": 6, "new_text": "    return a - b\n"}))
        before = server.jobs_run
        _, done, info = env.step(Action("submit"))
        assert done and info["final_test_passed"], env.result
        assert server.jobs_run == before, "grading forked from the episode's server"


LITTER = ("!import os, subprocess, sys; open('/tmp/litter', 'w').write('x'); open('/dev/shm/litter', 'w').write('x'); "
          "subprocess.Popen([sys.executable, '-c', 'import os, time\\nif os.fork(): os._exit(0)\\nwhile True:\\n "
          "open(\"daemon.txt\", \"w\").write(str(time.time())); time.sleep(0.02)'], start_new_session=True)")


@needs_bwrap
def test_the_next_episode_on_the_same_server_finds_nothing_of_the_last(tiny_task):
    zygotes.close_all()
    with DebugEnv(tiny_task, EnvConfig(sandbox="bwrap")) as env:
        env.reset()
        first = env._zygote
        assert first is not None
        env.step(Action("pdb", {"command": LITTER}))
        time.sleep(0.2)
        assert (env.ws / "daemon.txt").is_file()
        env.step(Action("submit"))
    with DebugEnv(tiny_task, EnvConfig(sandbox="bwrap")) as env:
        env.reset()
        assert env._zygote is first, "the server was not kept for the next episode"
        obs, _, _ = env.step(Action("pdb", {"command": "!import os; print('SEEN', [p for p in ('/tmp/litter', "
                                                       "'/dev/shm/litter') if os.path.exists(p)], "
                                                       "sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"}))
    seen = obs.split("SEEN", 1)[1]
    assert seen.startswith(" []"), obs
    pids = eval(seen.split("]", 1)[1].strip().split("\n")[0])  # init, server, this session's process
    assert len(pids) == 3, obs


@needs_bwrap
def test_what_the_agents_session_started_is_gone_before_grading_reads_the_workspace(tiny_task):
    with DebugEnv(tiny_task, EnvConfig(sandbox="bwrap")) as env:
        env.reset()
        env.step(Action("edit", {"path": "calc/ops.py", "start": 6, "end": 6, "new_text": "    return a - b\n"}))
        env.step(Action("pdb", {"command": LITTER}))
        time.sleep(0.2)
        _, done, info = env.step(Action("submit"))
        assert done and info["final_test_passed"], env.result
        stamp = (env.ws / "daemon.txt").read_text()
        time.sleep(0.2)
        assert (env.ws / "daemon.txt").read_text() == stamp, "the session's daemon outlived grading"


@needs_bwrap
def test_the_session_falls_back_to_a_fresh_process_when_the_project_shadows_what_the_server_imported(tiny_task):
    """A project module named like one the server imported (selectors) would not be the one a fresh
    interpreter imports; the forked launcher says so and the session starts afresh for good."""
    with DebugEnv(tiny_task, EnvConfig(sandbox="bwrap")) as env:
        env.reset()
        (env.ws / "selectors.py").write_text("SHADOW = True\n")
        obs, _, _ = env.step(Action("pdb", {"command": "restart"}))
        assert env.session.zygote is None
        obs, _, _ = env.step(Action("pdb", {"command": "!import selectors; print('SHADOW', hasattr(selectors, 'SHADOW'))"}))
        assert "SHADOW True" in obs, obs


@needs_bwrap
def test_a_forked_session_is_interrupted_in_the_looping_frame(tiny_task):
    with DebugEnv(tiny_task, EnvConfig(sandbox="bwrap", command_timeout_s=1.0)) as env:
        env.reset()
        assert env.session.zygote is not None
        obs, _, _ = env.step(Action("pdb", {"command": "!while True: pass"}))
        assert "interrupted" in obs.lower(), obs
        obs, _, _ = env.step(Action("pdb", {"command": "p 6 * 7"}))
        assert obs.strip().endswith("42"), obs
        env.step(Action("submit"))
    # the cut command is counted in the result (a campaign's row and report show it per arm); the answered one not
    assert env.result.commands_cut == 1 and env.result.to_dict()["commands_cut"] == 1


@needs_bwrap
def test_an_episode_without_the_server_plays_as_before(tiny_task):
    with DebugEnv(tiny_task, EnvConfig(sandbox="bwrap", zygote=False)) as env:
        env.reset()
        assert env._zygote is None and env.session.zygote is None
        env.step(Action("edit", {"path": "calc/ops.py", "start": 6, "end": 6, "new_text": "    return a - b\n"}))
        _, done, info = env.step(Action("submit"))
    assert done and info["final_test_passed"]


def _moves(ws: str, how: str) -> str:
    """A pdb command that takes the workspace away: renamed, or renamed with a solved copy (tests made to pass
    and the fix in) put in its place as a folder or as a link."""
    fake = str(Path(ws).parent / "fake")
    solved = (f"shutil.copytree({ws!r}, {fake!r}); "
              f"open({fake + '/calc/ops.py'!r}, 'w').write('def add(a, b):\\n    return a + b\\n\\n\\n"
              f"def sub(a, b):\\n    return a - b\\n'); ")
    swap = {"gone": "", "folder": f"os.rename({fake!r}, {ws!r}); ", "link": f"os.symlink('fake', {ws!r}); "}[how]
    return (f"!import os, shutil; {solved if how != 'gone' else ''}os.rename({ws!r}, {ws + '.old'!r}); "
            f"{swap}print('moved')")


@pytest.mark.parametrize("how", ["gone", "folder", "link"])
@pytest.mark.parametrize("sandbox", ["plain", "bwrap"])
def test_a_workspace_the_agent_moves_ends_the_episode_tampered_and_ungraded(tiny_task, sandbox, how):
    """On the server the workspace sits in the server's writable folder, so the agent's code can rename it.
    Before, the next step raised FileNotFoundError out of the disk cap's walk (a crash of the episode loop),
    and a folder or link put in its place was what edits and grading then read."""
    if sandbox == "bwrap" and bwrap_unavailable_reason():
        pytest.skip(bwrap_unavailable_reason())
    zygotes.close_all()
    with DebugEnv(tiny_task, EnvConfig(sandbox=sandbox)) as env:
        env.reset()
        server_ = env._zygote
        obs, done, info = env.step(Action("pdb", {"command": _moves(str(env.ws), how)}))
        assert done and "was moved, removed or replaced during the episode: graded unsolved" in obs, obs
        assert info["termination_reason"] == "tampered" and not info["final_test_passed"]
        assert env.result.grading == {}, "whatever sat at the workspace's path was graded"
        assert env.step(Action("submit")).observation == "The episode is over."
    assert list(server_.folder.iterdir()) == [] or not server_.alive  # nothing of it is left for the next one


def test_a_workspace_moved_between_steps_is_caught_before_the_next_action_uses_it(tiny_task):
    """A process the agent left running moves the workspace after its step answered: the next action (here
    an edit, which would write through a link) never runs."""
    zygotes.close_all()
    with DebugEnv(tiny_task, EnvConfig(sandbox="plain")) as env:
        env.reset()
        ws = str(env.ws)
        later = f"import os, time; time.sleep(1.0); os.rename({ws!r}, {ws + '.old'!r}); os.symlink('/tmp', {ws!r})"
        env.step(Action("pdb", {"command": f"!import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
                                           f"{later!r}], start_new_session=True)"}))
        deadline = time.monotonic() + 10
        while not os.path.islink(ws) and time.monotonic() < deadline:
            time.sleep(0.05)
        obs, done, info = env.step(Action("edit", FIX))
        assert done and info["termination_reason"] == "tampered" and not obs.startswith("Edited"), obs


def test_the_hosts_file_tools_never_follow_a_link_swapped_in_between_the_checks(tiny_task, tmp_path):
    """The checks run before and after each action; a process the agent left running can still swap the
    workspace for a link in between. The host's edits and views go through the folder held open since
    reset, so they land in the agent's own (moved) folder, never at the link's target on the host. Here the
    race is won by hand: the swap, then the tool, with no check between."""
    outside = tmp_path / "outside"
    shutil.copytree(tiny_task.repo, outside)
    zygotes.close_all()
    with DebugEnv(tiny_task, EnvConfig(sandbox="plain")) as env:
        env.reset()
        ws = env.ws
        os.rename(ws, f"{ws}.old")
        os.symlink(outside, ws)
        observation, _ = env._dispatch("edit", FIX)
        assert observation.startswith("Edited calc/ops.py"), observation
        assert "a - b" not in (outside / "calc" / "ops.py").read_text(), "the edit followed the link out"
        assert "a - b" in Path(f"{ws}.old", "calc", "ops.py").read_text()
        assert "a - b" in env._dispatch("view", {"path": "calc/ops.py"})[0]
