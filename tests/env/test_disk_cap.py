"""The workspace's host-disk cap, on real episodes through the real sandbox and pdb.

A pdb ``!`` command (or a background process it starts) can write files into the workspace, which is
on the host's disk; each file is bounded by RLIMIT_FSIZE, their number was not. Each test here writes
from pdb the way an agent would and checks that the writing is stopped, that the observation says why
and what to do, and what the host holds afterwards.
"""

from __future__ import annotations

import time

import pytest

from pdbgym.agent.play import play_policy
from pdbgym.agent.scripted import ScriptedPolicy
from pdbgym.env import Action, DebugEnv, EnvConfig
from pdbgym.sandbox.diskuse import measure

MiB = 1024**2
# 5 files of 60 MB from one pdb command (the red team's 301 MB); the cap is lowered to 64 MiB so that the
# writing (about 500 MB/s here) is stopped well before its end whatever the timing of the polls.
WRITE_5_X_60 = (r'''!exec("for i in range(5):\n    with open('big%d.bin' % i, 'wb') as f:\n'''
                r'''        for _ in range(60): f.write(b'x' * 1000 * 1000)")''')
# Up to 39,000 files: just under the gross excess (twice the 20,000 allowed), so however late a loaded
# machine's watcher walks, the episode goes on and is told in the same step.
WRITE_39000_FILES = (r'''!exec("import os\nos.makedirs('many', exist_ok=True)\n'''
                     r'''for i in range(39000): open('many/f%d' % i, 'w').close()")''')
BACKGROUND_WRITER = (r'''!import subprocess, sys; subprocess.Popen([sys.executable, '-c', "import itertools\n'''
                     r'''for i in itertools.count(): open('bg%d.bin' % i, 'wb').write(b'x' * 30 * 2**20)"], '''
                     r'''start_new_session=True)''')
# How far past the cap the writing may get before a poll sees it: one poll interval (0.2 s) of writing at
# a few hundred MB/s, with room for a loaded machine.
OVERSHOOT = 160 * MiB
# The same for a background writer the watcher's thread must catch while the agent thinks: more room for a
# thread starved on a loaded machine (236 MiB was seen beside a test suite), far below the gigabytes that 3 s
# of unchecked writing leave.
BACKGROUND_OVERSHOOT = 512 * MiB


def test_a_pdb_command_writing_5_x_60_mb_is_stopped_and_told(tiny_task):
    config = EnvConfig(workspace_extra_bytes=64 * MiB)
    with DebugEnv(tiny_task, config) as env:
        env.reset()
        cap = env._disk.limit
        obs, done, _ = env.step(Action("pdb", {"command": WRITE_5_X_60}))
        usage = measure(env.ws)
        assert not done
        assert "[disk cap]" in obs and "over its disk cap" in obs and "os.remove" in obs, obs
        assert "64 MiB" in obs and "restart" in obs
        assert usage.bytes < 5 * 60 * 1000 * 1000, "the writing was not stopped"
        assert usage.bytes < cap.bytes + OVERSHOOT, usage.describe()
        # The agent deletes the files from the restarted session; the episode goes on.
        obs, done, _ = env.step(Action("pdb", {"command": "!import glob, os; [os.remove(p) for p in glob.glob('big*')]"}))
        assert not done and "back under its disk cap" in obs, obs
        obs, done, _ = env.step(Action("pdb", {"command": "p 40 + 2"}))
        assert not done and "42" in obs and "[disk cap]" not in obs


@pytest.mark.slow
def test_many_small_files_are_stopped_and_an_episode_left_over_the_cap_ends(tiny_task):
    with DebugEnv(tiny_task, EnvConfig(command_timeout_s=30)) as env:  # the default cap: +20,000 files
        env.reset()
        cap = env._disk.limit
        obs, done, _ = env.step(Action("pdb", {"command": WRITE_39000_FILES}))
        usage = measure(env.ws)
        assert not done and "[disk cap]" in obs and "over its disk cap" in obs and "20,000 files" in obs, obs
        # Whether the watcher stopped the writer mid-way depends on the machine's load (on CI's two busy
        # cores it walked after all 39,000 were written); the step's own check tells the agent either way.
        assert cap.files < usage.files <= cap.files + 19_001, usage.describe()  # the repo, 39,000 files, many/
        obs, done, info = env.step(Action("pdb", {"command": "p 1"}))  # not deleting: the episode ends
        assert done and info["termination_reason"] == "other", obs
        assert "still over its disk cap" in obs and "The episode ends." in obs
        assert "disk cap" in env.result.detail


def test_a_background_writer_is_stopped_between_tool_calls(tiny_task):
    config = EnvConfig(workspace_extra_bytes=64 * MiB)
    with DebugEnv(tiny_task, config) as env:
        env.reset()
        cap = env._disk.limit
        obs, done, _ = env.step(Action("pdb", {"command": BACKGROUND_WRITER}))
        assert not done and "Popen" in obs
        sizes = []  # (seconds since the call, bytes in the workspace)
        started = time.monotonic()
        while time.monotonic() - started < 3.0:  # the agent thinking; the writer would go on forever
            sizes.append((time.monotonic() - started, measure(env.ws).bytes))
            time.sleep(0.05)
        peak = max(size for _, size in sizes)
        # Stopped while the agent thinks: nothing written in the last second.
        assert {size for at, size in sizes if at > 2.0} == {sizes[-1][1]}, "the writer still ran after 2 s"
        assert peak < cap.bytes + BACKGROUND_OVERSHOOT, f"{peak / MiB:.0f} MiB"
        obs, done, _ = env.step(Action("pdb", {"command": "p 1"}))
        assert "[disk cap]" in obs and "were stopped" in obs, obs
        before = measure(env.ws).bytes
        time.sleep(1.0)
        assert measure(env.ws).bytes == before, "the writer still runs"


def test_an_honest_episode_hears_nothing_of_the_cap(tiny_task, tmp_path):
    result = play_policy(tiny_task, ScriptedPolicy(tiny_task), transcript_path=tmp_path / "t.json")
    assert result.termination_reason == "solved"
    assert "[disk cap]" not in (tmp_path / "t.json").read_text()


@pytest.mark.parametrize("bad", [{"workspace_extra_bytes": -1}, {"disk_poll_s": 0}])
def test_bad_cap_settings_are_refused(tiny_task, bad):
    with DebugEnv(tiny_task, EnvConfig(**bad)) as env, pytest.raises(ValueError, match="must be"):
        env.reset()


def test_an_excess_written_while_the_watcher_did_not_poll_is_found_in_the_same_step(tmp_path):
    from pdbgym.sandbox.diskguard import DiskGuard

    (tmp_path / "repo.py").write_text("x = 1\n")
    guard = DiskGuard(tmp_path, extra_bytes=16 * 1024**2, extra_files=3000)
    deadline = time.monotonic() + 10
    while guard.watcher.last is None and time.monotonic() < deadline:
        time.sleep(0.01)
    guard.stop()  # a starved watcher thread: it walks no more
    for i in range(5000):  # over both allowances, not twice over: 5,000 files of 4 KiB (other tests' files
        # created or deleted meanwhile on the same filesystem move the estimate by less than the margin)
        (tmp_path / f"f{i}").write_bytes(b"x" * 4096)
    note, ending = guard.after_step()
    assert "over its disk cap" in note and ending is None and guard.watcher.trips == 1, note
    for i in range(5000):
        (tmp_path / f"f{i}").unlink()
    note, _ = guard.after_step()
    assert "back under its disk cap" in note


def test_free_space_lost_elsewhere_on_the_filesystem_walks_the_workspace_but_tells_the_agent_nothing(tmp_path):
    from pdbgym.sandbox.diskguard import DiskGuard

    (tmp_path / "ws").mkdir()
    guard = DiskGuard(tmp_path / "ws", extra_bytes=16 * 1024**2, extra_files=3000)
    deadline = time.monotonic() + 10
    while guard.watcher.last is None and time.monotonic() < deadline:
        time.sleep(0.01)
    guard.stop()
    for i in range(5000):  # another episode's files, beside the workspace, on the same filesystem
        (tmp_path / f"f{i}").write_bytes(b"x" * 4096)
    assert guard.watcher.looks_over()  # the estimate cannot tell whose files they are
    assert guard.after_step() == ("", None) and guard.watcher.trips == 0
