"""One source of defaults and one name per flag: every command's flag defaults are its config's field
defaults, every episode setting is the shared home's (pdbgym.episode_defaults) or a named exception, the
tables of docs/defaults.md say the same, and the old flag spellings still work without being shown."""

import ast
import dataclasses
import inspect
import json
import re
import typing
from pathlib import Path

import click
import pytest
import typer
import typer.main
from typer.testing import CliRunner

from pdbgym import episode_defaults
from pdbgym.agent.backends.base import SamplingParams
from pdbgym.agent.build import CacheBuildConfig
from pdbgym.agent.commands import cache_build_command, run_command
from pdbgym.agent.executor import ExecutorConfig
from pdbgym.agent.loop import AgentConfig
from pdbgym.agent.play import RunConfig
from pdbgym.cli import app
from pdbgym.commandapp import config_flags
from pdbgym.defaults import defaults_of
from pdbgym.divergence.commands import divergence_command
from pdbgym.divergence.compare import DivergenceConfig
from pdbgym.env import EnvConfig
from pdbgym.episode_defaults import COMMAND_EPISODES, EPISODE, EXCEPTIONS, EpisodeSettings
from pdbgym.evaluate.campaign import CampaignConfig
from pdbgym.evaluate.commands import eval_command, select_command
from pdbgym.evaluate.procedures import EvalConfig, SelectConfig
from pdbgym.train.commands import dagger_command, sft_command
from pdbgym.train.dagger.config import DaggerConfig
from pdbgym.train.demo.commands import demo_command
from pdbgym.train.demo.config import DemoConfig
from pdbgym.train.experiment.commands import run_command as experiment_command
from pdbgym.train.experiment.config import ExperimentConfig
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
    (divergence_command, DivergenceConfig), (run_command, RunConfig), (run_command, EnvConfig),
    (sft_command, SFTTrainConfig), (dagger_command, DaggerConfig), (grpo, GRPORunConfig), (demo_command, DemoConfig),
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


DOC = Path(__file__).resolve().parents[1] / "docs" / "defaults.md"
SETTINGS = tuple(f.name for f in dataclasses.fields(EpisodeSettings))
COMMANDS = {"run": run_command, "cache build": cache_build_command, "eval": eval_command,
            "eval select": select_command, "train dagger": dagger_command, "train grpo": grpo,
            "experiment run": experiment_command}
SETTING_OF = {("train grpo", "budget_end"): "turn_budget"}  # GRPO's turn budget is where its curriculum ends


def _expected(command: str, setting: str) -> float:
    return getattr(COMMAND_EPISODES[command], setting)


def _episode_flags() -> list[tuple[str, str, object]]:
    """(command, episode setting, the flag's default) for every episode flag of every command."""
    found = []
    for command, function in COMMANDS.items():
        for name, parameter in inspect.signature(function).parameters.items():
            setting = SETTING_OF.get((command, name), name)
            if setting in SETTINGS:
                found.append((command, setting, parameter.default))
    return found


def test_every_episode_flag_defaults_to_the_shared_home_or_a_named_exception():
    flags = _episode_flags()
    for command, setting, default in flags:
        assert default == _expected(command, setting), (
            f"pdbgym {command} --{setting.replace('_', '-')} defaults to {default}, not "
            f"{_expected(command, setting)}: take it from pdbgym.episode_defaults, or name the exception there")
    assert {c for c, _, _ in flags} == set(COMMANDS) - {"experiment run"} and len(flags) >= 20  # its file sets them
    # an exception differs from the shared value, and every command's config holds its own defaults
    unshared = {(c, s) for c, s, default in flags if default != getattr(EPISODE, s)}
    assert unshared <= set(EXCEPTIONS)
    assert all(value != getattr(EPISODE, setting) for (_, setting), value in EXCEPTIONS.items())
    experiment = ExperimentConfig("x")
    held = {"cache build": CacheBuildConfig.episode, "eval": EvalConfig.episode, "eval select": SelectConfig.episode,
            "train dagger": DaggerConfig.episode,
            "experiment run": dataclasses.replace(experiment.episodes, temperature=experiment.eval.temperature)}
    assert all(held[command] == COMMAND_EPISODES[command] for command in held)
    grpo_config = GRPORunConfig("p", "t", Path("o"))
    assert (grpo_config.max_context_tokens, grpo_config.budget_end, grpo_config.temperature,
            grpo_config.max_new_tokens) == (COMMAND_EPISODES["train grpo"].max_context_tokens,
                                            COMMAND_EPISODES["train grpo"].turn_budget,
                                            COMMAND_EPISODES["train grpo"].temperature,
                                            COMMAND_EPISODES["train grpo"].max_new_tokens)


def test_the_demos_episode_flags_keep_its_files_values_unless_given():
    """``pdbgym demo`` runs an experiment file: its episode flags default to None, the file's value."""
    import tomllib

    from pdbgym.train.demo.config import PRESET, demo_experiment

    flags = inspect.signature(demo_command).parameters
    assert flags["turn_budget"].default is None and flags["temperature"].default is None
    experiment, table = demo_experiment(DemoConfig()), tomllib.loads(PRESET.read_text())["episodes"]
    assert {name: getattr(experiment.episodes, name) for name in table} == table and experiment.eval.temperature == 0
    assert demo_experiment(DemoConfig(overrides={"episodes": {"turn_budget": 3}})).episodes.turn_budget == 3


def test_two_classes_declare_a_turn_budget():
    """The episode's settings type and the environment's config; every other config nests ``EpisodeSettings``.
    A ``TypedDict`` is a record of what ran (a log line on disk: GRPO's per-rank step row names the turn budget
    the step played), not a setting, and is not counted."""
    root = Path(__file__).resolve().parents[1] / "pdbgym"
    declaring = set()
    for path in root.rglob("*.py"):
        if "tasks/builtin" in path.as_posix() or "tasks/regression" in path.as_posix():
            continue  # the tasks' own projects
        for node in ast.walk(ast.parse(path.read_text())):
            records = isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name) and base.id == "TypedDict" for base in node.bases)
            if isinstance(node, ast.ClassDef) and not records and any(
                    isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    and item.target.id == "turn_budget" for item in node.body):
                declaring.add(node.name)
    assert declaring == {"EpisodeSettings", "EnvConfig"}


def test_configs_without_a_flag_read_the_shared_home():
    assert AgentConfig().max_context_tokens == EPISODE.max_context_tokens  # run's context (no flag)
    sampling = SamplingParams()
    assert (sampling.temperature, sampling.top_p, sampling.max_new_tokens) == (
        EPISODE.temperature, EPISODE.top_p, EPISODE.max_new_tokens)
    assert EnvConfig().turn_budget == EPISODE.turn_budget
    assert RunConfig("t").sampling == sampling and RunConfig("t").env.turn_budget == EPISODE.turn_budget
    assert CampaignConfig(tasks="builtin", arms=[]).episode == EPISODE
    # DAgger's context is SFT's example length: a labelled state must fit it whole
    assert DaggerConfig.episode.max_context_tokens == SFTTrainConfig.max_length


def test_grpo_config_fields_are_its_flags_but_the_two_named():
    flags = set(inspect.signature(grpo).parameters)
    fields = {f.name for f in dataclasses.fields(GRPORunConfig)}
    assert fields - flags == {"use_dora", "extra"}  # --lora sets use_dora; extra is for library callers
    assert "``use_dora``" in GRPORunConfig.__doc__ and "``extra``" in GRPORunConfig.__doc__


def _table(section: str) -> list[list[str]]:
    """The rows (cells stripped) of the first table under the ``## section`` heading of docs/defaults.md."""
    text = DOC.read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in body.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def _number(cell: str) -> float:
    return float(re.search(r"\d[\d,]*(?:\.\d+)?", cell).group().replace(",", ""))


def _command(cell: str) -> str:
    return cell.strip("`").removeprefix("pdbgym ")


def test_the_documented_shared_values_are_the_home():
    documented = {row[0].strip("`"): _number(row[1]) for row in _table("Shared values")}
    assert documented == dataclasses.asdict(EPISODE)


SETTINGS_BY_COLUMN = ("max_context_tokens", "turn_budget", "temperature", "top_p", "max_new_tokens")


def test_the_documented_command_table_is_what_the_commands_do():
    rows = _table("Per command")
    assert {_command(row[0]) for row in rows} == set(COMMANDS)
    flags = {(c, s): default for c, s, default in _episode_flags()}
    bold = set()
    for row in rows:
        command = _command(row[0])
        for setting, cell in zip(SETTINGS_BY_COLUMN, row[1:], strict=True):
            assert _number(cell) == _expected(command, setting), (command, setting, cell)
            if "**" in cell:
                bold.add((command, setting))
            if "no flag" in cell:
                assert (command, setting) not in flags, f"{command} has a flag for {setting}: the table says not"
            else:
                assert flags[(command, setting)] == _number(cell), (command, setting, cell)
    assert bold == set(EXCEPTIONS)


def test_the_documented_exceptions_are_the_named_constants():
    documented = {}
    for constant, command, setting, value, why in _table("Named exceptions"):
        assert getattr(episode_defaults, constant.strip("`")) == _number(value) and why
        documented[(command.strip("`"), setting.strip("`"))] = _number(value)
    assert documented == EXCEPTIONS


def test_every_named_default_change_is_the_default_now():
    rows = _table("Named default changes")
    assert rows
    for command, flag, old, new in rows:
        parameters = inspect.signature(COMMANDS[_command(command)]).parameters
        default = parameters[flag.strip("`").removeprefix("--").replace("-", "_")].default
        assert default == _number(new) != _number(old), (command, flag)


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


# The shown flags of commands when they were written by hand (`eval`, `train dagger`: 2834dec; `run`, `cache build`,
# `eval select`: 89c5a6b, read from typer's parameters before they were built from their configs): scripts use
# these names.
HAND_WRITTEN_FLAGS = {
    "eval": {"--arm", "--device", "--force", "--json", "--k", "--local-episodes", "--max-context-tokens",
             "--max-new-tokens", "--out", "--ray-address", "--runs", "--seed", "--split", "--splits", "--tasks",
             "--teacher", "--teacher-cache", "--temperature", "--turn-budget", "--workers"},
    "train dagger": {"--device", "--eval-runs", "--iterations", "--max-context-tokens", "--max-new-tokens",
                     "--name-prefix", "--out", "--runs", "--seed", "--sft", "--splits", "--store", "--student", "--tasks",
                     "--teacher", "--teacher-cache", "--teacher-temperature", "--temperature", "--tokenizer",
                     "--turn-budget", "--val-tasks"},
}
# ... and, for the commands moved last, each shown flag's default then (None: required or no default)
HAND_WRITTEN_DEFAULTS = {
    "run": {"--task": None, "--policy": "scripted", "--turn-budget": 30, "--transcript": None, "--sandbox": "auto",
            "--json": False, "--temperature": 0.7, "--max-new-tokens": 512, "--seed": None},
    "cache build": {"--policy": None, "--out": None, "--tasks": "builtin", "--runs": 1, "--temperature": 0.7,
                    "--top-p": 0.9, "--dataset": "pdbgym_builtin", "--workers": 0, "--local-episodes": 0,
                    "--max-new-tokens": 512, "--max-context-tokens": 32768, "--turn-budget": 30,
                    "--command-timeout-s": 10.0, "--seed": None, "--tokenizer": "embedded", "--api": "auto",
                    "--logprob-mode": "raw", "--tool-format": None, "--device": "cpu", "--ray-address": None,
                    "--json": False},
    "eval select": {"--checkpoint": None, "--splits": None, "--tasks": "builtin", "--select-on": "val",
                    "--report-on": "test", "--runs": 2, "--out": Path("runs/select"), "--turn-budget": 30,
                    "--force": False, "--temperature": 0.7, "--max-new-tokens": 512, "--max-context-tokens": 32768,
                    "--workers": 0, "--ray-address": None},
}
HAND_WRITTEN_FLAGS.update({command: set(defaults) for command, defaults in HAND_WRITTEN_DEFAULTS.items()})
# Flags added since, each new (not a renamed old one): a local model's episodes over several processes.
ADDED = {"eval": {"--local-processes": 1}, "cache build": {"--local-processes": 1}}
for command, added in ADDED.items():
    HAND_WRITTEN_FLAGS[command] |= set(added)
    if command in HAND_WRITTEN_DEFAULTS:
        HAND_WRITTEN_DEFAULTS[command] = {**HAND_WRITTEN_DEFAULTS[command], **added}
BUILT = [("eval", eval_command, EvalConfig), ("train dagger", dagger_command, DaggerConfig),
         ("run", run_command, RunConfig), ("cache build", cache_build_command, CacheBuildConfig),
         ("eval select", select_command, SelectConfig)]


def _click_command(command: str) -> click.Command:
    found = typer.main.get_command(app)
    for word in command.split():
        found = found.commands[word]
    return found


@pytest.mark.parametrize("command, function, config", BUILT, ids=[c for c, _, _ in BUILT])
def test_commands_are_built_from_their_configs_under_the_hand_written_flag_names(command, function, config):
    assert function.config_class is config
    result = CliRunner().invoke(app, [*command.split(), "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert set(re.findall(r"^  (--[a-z0-9-]+)", result.output, re.M)) - {"--help"} == HAND_WRITTEN_FLAGS[command]
    text = " ".join(result.output.split())
    hints = typing.get_type_hints(config)
    for spec in dataclasses.fields(config):  # every flag's help is its field's, declared once there
        if spec.metadata["cli"] and not dataclasses.is_dataclass(hints[spec.name]):
            assert spec.metadata["help"] in text, spec.name
    if command in HAND_WRITTEN_DEFAULTS:
        shown = {p.opts[0]: p.default for p in _click_command(command).params if not p.hidden}
        assert shown == HAND_WRITTEN_DEFAULTS[command]


def test_the_flattened_flags_fill_the_nested_settings_and_their_old_spellings_too():
    dagger = {flag.parameter.name: flag.field for flag in config_flags(DaggerConfig)}
    assert dagger["turn_budget"] == dagger["budget"] == ("episode", "turn_budget")
    assert dagger["max_context_tokens"] == dagger["context_tokens"] == ("episode", "max_context_tokens")
    assert "top_p" not in dagger and "ledger" not in dagger  # the student samples at top-p 1; library callers only
    evaluation = {flag.parameter.name: flag.field for flag in config_flags(EvalConfig)}
    assert evaluation["workers"] == ("executor", "workers") and evaluation["ray"] == ("executor", "ray_address")
    assert "top_p" not in evaluation and "title" not in evaluation
    run = {flag.parameter.name: flag.field for flag in config_flags(RunConfig)}
    assert run["turn_budget"] == run["budget"] == ("env", "turn_budget") and run["sandbox"] == ("env", "sandbox")
    assert run["temperature"] == ("sampling", "temperature") and run["seed"] == ("seed",)
    assert "top_p" not in run and "command_timeout_s" not in run and "zygote" not in run  # no flag, as before
    cache = {flag.parameter.name: flag.field for flag in config_flags(CacheBuildConfig)}
    assert cache["top_p"] == ("episode", "top_p") and cache["budget"] == ("episode", "turn_budget")
    select = {flag.parameter.name: flag.field for flag in config_flags(SelectConfig)}
    assert select["checkpoints"] == ("checkpoints",) and select["ray_address"] == ("executor", "ray_address")
    assert "top_p" not in select and "local_episodes" not in select


class _Made(Exception):
    """Raised by a stand-in for a command's library call, carrying the config the command made."""


def _config_made(monkeypatch, module, function: str, argv: list[str]) -> object:
    def stand_in(config, *args, **kwargs):
        raise _Made(config)

    monkeypatch.setattr(module, function, stand_in)
    result = CliRunner().invoke(app, argv)
    assert isinstance(result.exception, _Made), result.output
    return result.exception.args[0]


@pytest.mark.parametrize("flags, ray_address", [([], None), (["--ray"], "local"), (["--ray-address", "a:1"], "a:1"),
                                                (["--ray", "--ray-address", "a:1"], "a:1")])
def test_cache_builds_hidden_ray_switch_still_starts_a_local_cluster(monkeypatch, tmp_path, flags, ray_address):
    from pdbgym.agent import build

    config = _config_made(monkeypatch, build, "build_cache",
                          ["cache", "build", "--policy", "scripted", "--out", str(tmp_path), *flags, "--budget", "4"])
    assert config.ray_address == ray_address and config.episode.turn_budget == 4 and config.episode.top_p == 0.9


def test_run_and_select_fill_their_configs_from_the_flags(monkeypatch, tmp_path):
    from pdbgym.agent import play
    from pdbgym.evaluate import procedures

    config = _config_made(monkeypatch, play, "run_one", ["run", "--task", "t", "--budget", "3", "--sandbox", "plain",
                                                         "--temperature", "0", "--seed", "5"])
    assert config == RunConfig("t", env=EnvConfig(turn_budget=3, sandbox="plain"),
                               sampling=SamplingParams(temperature=0.0), seed=5)
    config = _config_made(monkeypatch, procedures, "select_checkpoint",
                          ["eval", "select", "--checkpoint", "a=scripted", "--checkpoint", "b=scripted", "--splits",
                           str(tmp_path / "s.json"), "--budget", "7", "--workers", "2", "--force"])
    assert config == SelectConfig(["a=scripted", "b=scripted"], tmp_path / "s.json", force=True,
                                  episode=dataclasses.replace(SelectConfig.episode, turn_budget=7),
                                  executor=ExecutorConfig(workers=2))
