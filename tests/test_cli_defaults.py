"""One source of defaults and one name per flag: every command's flag defaults are its config's field
defaults, and the old flag spellings still work without being shown."""

import inspect
import json

import pytest
from typer.testing import CliRunner

from pdbgym.agent.build import CacheBuildConfig
from pdbgym.agent.commands import cache_build_command, run_command
from pdbgym.cli import app
from pdbgym.defaults import defaults_of
from pdbgym.divergence.commands import divergence_command
from pdbgym.divergence.compare import DivergenceConfig
from pdbgym.env import EnvConfig
from pdbgym.evaluate.commands import eval_command, select_command
from pdbgym.evaluate.procedures import EvalConfig, SelectConfig
from pdbgym.train.commands import dagger_command, sft_command
from pdbgym.train.dagger.config import DaggerConfig
from pdbgym.train.grpo.commands import grpo
from pdbgym.train.grpo.config import GRPORunConfig
from pdbgym.train.sft.config import SFTTrainConfig

# Flags whose config field has another name, is nested, or is given as text.
RENAMED = {"json_output": None, "as_json": None, "json_out": "json_out", "k": None, "arm": None, "student": None,
           "checkpoints": None, "plot": None, "work_dir": None, "ctx": None, "ray": None, "budget": None,
           "context_tokens": None, "transcript": None,
           "target_modules": None, "sft": None}  # the last two: text forms (a comma list, JSON) of the field


@pytest.mark.parametrize("command,config", [
    (cache_build_command, CacheBuildConfig), (eval_command, EvalConfig), (select_command, SelectConfig),
    (divergence_command, DivergenceConfig), (run_command, EnvConfig),
    (sft_command, SFTTrainConfig), (dagger_command, DaggerConfig), (grpo, GRPORunConfig),
])
def test_flag_defaults_are_the_config_defaults(command, config):
    defaults = vars(defaults_of(config))
    checked = 0
    for name, parameter in inspect.signature(command).parameters.items():
        if RENAMED.get(name, name) is None or name not in defaults:
            continue
        assert parameter.default == defaults[name], f"--{name.replace('_', '-')} default differs from {config.__name__}"
        checked += 1
    assert checked >= 2


def test_shared_defaults_have_one_home():
    assert CacheBuildConfig.turn_budget == EvalConfig.turn_budget == SelectConfig.turn_budget == EnvConfig.turn_budget
    assert CacheBuildConfig.temperature == EvalConfig.temperature


@pytest.mark.parametrize("argv,hidden", [
    (["run", "--help"], "--budget"), (["eval", "--help"], "--context-tokens"), (["cache", "build", "--help"], "--ray "),
])
def test_old_spellings_are_hidden(argv, hidden):
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    assert result.exit_code == 0 and hidden not in result.output
    assert "--turn-budget" in result.output or "--max-context-tokens" in result.output or "--ray-address" in result.output


@pytest.mark.parametrize("flag", ["--turn-budget", "--budget"])
def test_old_and_new_turn_budget_flags_both_cap_the_episode(tiny_task, tmp_path, flag):
    result = CliRunner().invoke(app, ["run", "--task", str(tiny_task.path), flag, "2", "--json",
                                      "--transcript", str(tmp_path / "t.json")])
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.stdout)
    assert outcome["termination_reason"] == "budget" and outcome["actions_used"] == 2
