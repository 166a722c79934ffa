"""`pdbgym run` plays any policy by name through one library function."""

import json

import pytest

from pdbgym.agent.play import play_episode
from pdbgym.env import EnvConfig
from pdbgym.errors import PdbgymError


def test_scripted_by_name(tiny_task, tmp_path):
    result = play_episode(tiny_task, "scripted", EnvConfig(), tmp_path / "t.json")
    assert result.termination_reason == "solved" and result.final_test_passed
    assert json.loads((tmp_path / "t.json").read_text())["env"]["result"]["final_test_passed"] is True


def test_unknown_policy_is_refused_before_the_episode(tiny_task, tmp_path):
    with pytest.raises(PdbgymError, match="not 'scripted', 'human', 'embedded'"):
        play_episode(tiny_task, "/no/such/model", EnvConfig(), tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


def test_unreachable_server_is_refused_before_the_episode(tiny_task, tmp_path):
    with pytest.raises(PdbgymError, match="127.0.0.1:9"):
        play_episode(tiny_task, "http://127.0.0.1:9", EnvConfig(), tmp_path / "t.json")


class _PersonWhoPressesCtrlC:
    """An interactive policy that acts once, then is interrupted at its next turn (as input() is)."""

    name = "human"
    interactive = True

    def __init__(self):
        self.turns = 0

    def reset(self, task, observation):
        pass

    def next_action(self, observation):
        from pdbgym.env import Action

        self.turns += 1
        if self.turns > 1:
            raise KeyboardInterrupt
        return Action("view", {"path": "calc/ops.py"})


def test_ctrl_c_at_a_persons_turn_ends_as_other_keeps_the_transcript_and_stops(tiny_task, tmp_path):
    from pdbgym.agent.play import play_policy

    with pytest.raises(KeyboardInterrupt):
        play_policy(tiny_task, _PersonWhoPressesCtrlC(), EnvConfig(), transcript_path=tmp_path / "t.json")
    transcript = json.loads((tmp_path / "t.json").read_text())
    assert transcript["termination_reason"] == "other" and transcript["actions_used"] == 1
    assert "interrupted (Ctrl-C)" in transcript["env"]["result"]["detail"]


def test_human_is_refused_where_nobody_is_at_the_terminal(tiny_task, tmp_path):
    from pdbgym.agent.build import CacheBuildConfig, build_cache
    from pdbgym.evaluate.campaign import Arm

    with pytest.raises(PdbgymError, match="reads a terminal"):
        Arm.parse("me=human")
    with pytest.raises(PdbgymError, match="reads a terminal"):
        build_cache(CacheBuildConfig(policy="human", out=tmp_path / "c", tasks=str(tiny_task.path)))
    assert not (tmp_path / "c").exists()


def test_an_episode_after_an_executor_loop_left_early_plays_instead_of_stopping(tiny_task, tmp_path):
    """Leaving ``run_jobs``' loop early stops its jobs and leaves this process's stop flag set; an episode
    played afterwards is new work and must not read that stop as a Ctrl-C (it did, and a test session on one
    worker ended in KeyboardInterrupt where the files ran in this order)."""
    from pdbgym.agent.executor import ExecutorConfig, run_jobs
    from pdbgym.agent.jobs import EpisodeJob
    from pdbgym.agent.loop import AgentConfig
    from pdbgym.agent.policies import parse_policy
    from pdbgym.agent.runner import run_job
    from pdbgym.interrupts import stop_requested

    job = EpisodeJob(str(tiny_task.path), tiny_task.instance_id, 0, parse_policy("scripted"), AgentConfig(),
                     EnvConfig())
    ended = run_jobs([job, job], ExecutorConfig(workers=1), run_job)
    next(ended)
    ended.close()  # the caller stops iterating: the executor stops the other job
    assert stop_requested()
    try:
        result = play_episode(tiny_task, "scripted", EnvConfig(), tmp_path / "t.json")
    except KeyboardInterrupt:
        pytest.fail("the episode read the earlier loop's stop as a Ctrl-C")
    assert result.termination_reason == "solved" and not stop_requested()
