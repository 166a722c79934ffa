"""Episodes with the pytest fork server (``EnvConfig.zygote``, the default under bwrap).

The server holds the agent's pdb session and test runs; grading never forks from it, it runs in a fresh
sandbox with the whole tree read-only. So: every red-team attack made in an episode's workspace beside the
server ends unsolved; what the agent's session started is gone before grading reads the workspace; and the
next episode on the same server finds nothing of the last one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
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
