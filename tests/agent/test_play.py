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
