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
