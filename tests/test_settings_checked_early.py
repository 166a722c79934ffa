"""Settings are checked when a command starts: a bad one is an error (exit 2) naming it, before any
episode plays or anything is written, never a failure at the first model turn with advice to rerun the
same command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pdbgym.agent.backends.base import SamplingParams
from pdbgym.cli import main
from pdbgym.episode_defaults import EpisodeSettings, SettingsError


def _run(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["pdbgym", *args])
    with pytest.raises(SystemExit) as ended:
        main()
    return int(ended.value.code or 0), ""


@pytest.mark.parametrize("flag, value, says", [("--temperature", "-1", "temperature must be >= 0"),
                                                ("--max-new-tokens", "0", "max_new_tokens must be")])
def test_a_model_arms_bad_sampling_is_refused_before_any_episode(tmp_path: Path, monkeypatch, capsys, flag, value,
                                                                 says):
    out = tmp_path / "campaign"
    code, _ = _run(monkeypatch, "eval", "--tasks", "builtin", "--arm", "a=embedded", "--runs", "1", flag, value,
                   "--out", str(out))
    assert code == 2 and says in capsys.readouterr().err
    assert not out.exists()


def test_an_unknown_device_is_refused_before_any_stage(tmp_path: Path, monkeypatch, capsys):
    out = tmp_path / "experiment"
    config = Path(__file__).resolve().parents[1] / "experiments" / "smollm2-ladder-short.toml"
    code, _ = _run(monkeypatch, "experiment", "run", str(config), "--out", str(out), "--device", "tpu",
                   "--until", "tasks")
    assert code == 2 and "--device 'tpu' is not a device" in capsys.readouterr().err
    assert not out.exists()


def test_sampling_settings_are_checked_where_they_are_made():
    with pytest.raises(SettingsError, match="temperature"):
        SamplingParams(temperature=-0.5)
    with pytest.raises(SettingsError, match=r"top_p must be in \(0, 1\]"):
        SamplingParams(top_p=1.5)
    assert SamplingParams(temperature=0.0, top_p=1.0, max_new_tokens=1).temperature == 0.0


@pytest.mark.parametrize("field, value", [("turn_budget", 0), ("turn_budget", -3), ("turn_budget", 2.5),
                                          ("max_context_tokens", 0), ("max_new_tokens", True), ("temperature", -1e-9),
                                          ("temperature", float("nan")), ("top_p", 0.0), ("top_p", 1.01)])
def test_each_episode_setting_is_checked_by_its_type(field, value):
    with pytest.raises(SettingsError, match=f"^{field} must be .*, got {value!r}$"):
        EpisodeSettings(**{field: value})
    assert EpisodeSettings(turn_budget=1, max_context_tokens=1, max_new_tokens=1, temperature=0, top_p=1).top_p == 1


BAD_EXPERIMENT = """name = "bad"
[tasks]
suites = ["builtin"]
[episodes]
{episodes}
[eval]
{evaluation}
"""


def _experiment(folder: Path, episodes: str = "", evaluation: str = "") -> str:
    path = folder / "bad.toml"
    path.write_text(BAD_EXPERIMENT.format(episodes=episodes, evaluation=evaluation))
    return str(path)


# (command and its required arguments, with OUT for the folder it would write; the bad flags; words the error says)
EVAL = ["eval", "--arm", "a=scripted", "--out", "OUT"]
SELECT = ["eval", "select", "--checkpoint", "a=scripted", "--splits", "OUT/splits.json", "--out", "OUT"]
DAGGER = ["train", "dagger", "--student", "embedded", "--teacher", "embedded", "--tasks", "builtin", "--out", "OUT"]
GRPO = ["train", "grpo", "--policy", "embedded", "--tasks", "builtin", "--out", "OUT"]
CACHE = ["cache", "build", "--policy", "scripted", "--out", "OUT"]
RUN = ["run", "--task", "builtin", "--transcript", "OUT/t.json"]
CASES = [
    (RUN, ["--turn-budget", "0"], "turn_budget"),
    (RUN, ["--temperature", "-1"], "temperature"),
    (RUN, ["--max-new-tokens", "0"], "max_new_tokens"),
    (RUN, ["--budget", "0"], "turn_budget"),  # the old spelling, hidden, still checked
    (CACHE, ["--runs", "0"], "runs"),
    (CACHE, ["--turn-budget", "-3"], "turn_budget"),
    (CACHE, ["--temperature", "-1"], "temperature"),
    (CACHE, ["--max-new-tokens", "0"], "max_new_tokens"),
    (CACHE, ["--max-context-tokens", "0"], "max_context_tokens"),
    (CACHE, ["--top-p", "0"], "top_p"),
    (CACHE, ["--ray", "--runs", "0"], "runs"),  # the hidden switch, still a switch
    (EVAL, ["--turn-budget", "-3"], "turn_budget"),
    (EVAL, ["--turn-budget", "0"], "turn_budget"),
    (EVAL, ["--runs", "-1"], "runs"),
    (EVAL, ["--temperature", "-1"], "temperature"),
    (EVAL, ["--max-new-tokens", "0"], "max_new_tokens"),
    (EVAL, ["--budget", "0"], "turn_budget"),  # the old spelling, hidden, still checked
    (EVAL, ["--context-tokens", "0"], "max_context_tokens"),
    (["eval", "--out", "OUT"], ["--runs", "1"], "at least one --arm"),
    (["eval", "plan", "--delta", "0.1"], ["--runs", "0"], "runs"),
    (SELECT, ["--runs", "0"], "runs"),
    (SELECT, ["--turn-budget", "-3"], "turn_budget"),
    (SELECT, ["--temperature", "-1"], "temperature"),
    (SELECT, ["--max-new-tokens", "0"], "max_new_tokens"),
    (SELECT, ["--budget", "0"], "turn_budget"),
    (["demo", "--out", "OUT"], ["--eval-runs", "0"], "eval_runs"),
    (["demo", "--out", "OUT"], ["--turn-budget", "-3"], "turn_budget"),
    (DAGGER, ["--runs", "0"], "runs"),
    (DAGGER, ["--eval-runs", "-1"], "eval_runs"),
    (DAGGER, ["--turn-budget", "-3"], "turn_budget"),
    (DAGGER, ["--temperature", "-1"], "temperature"),
    (DAGGER, ["--max-context-tokens", "0"], "max_context_tokens"),
    (DAGGER, ["--teacher-temperature", "-1"], "teacher_temperature"),
    (DAGGER, ["--sft", "[1]"], "--sft must be a JSON object"),
    (GRPO, ["--budget-end", "0"], "budget_end"),
    (GRPO, ["--val-runs", "0"], "val_runs"),
    (GRPO, ["--temperature", "-1"], "temperature"),
    (["experiment", "run", "EPISODES", "--out", "OUT"], ["turn_budget = -3"], "turn_budget"),
    (["experiment", "run", "EPISODES", "--out", "OUT"], ["max_new_tokens = 0"], "max_new_tokens"),
    (["experiment", "run", "EVAL", "--out", "OUT"], ["temperature = -1.0"], "temperature"),
    (["experiment", "run", "EVAL", "--out", "OUT"], ["runs = 0"], "runs"),
]


@pytest.mark.slow
@pytest.mark.parametrize("command, bad, says", CASES, ids=[" ".join(c[:2] + b) for c, b, _ in CASES])
def test_every_command_refuses_a_bad_episode_setting_in_one_line(tmp_path: Path, command, bad, says):
    out = tmp_path / "out"
    args = [str(out) if a == "OUT" else a.replace("OUT/", f"{out}/") for a in command]
    if "EPISODES" in args:  # an experiment's settings are its file's
        args[args.index("EPISODES")] = _experiment(tmp_path, episodes=bad[0])
    elif "EVAL" in args:
        args[args.index("EVAL")] = _experiment(tmp_path, evaluation=bad[0])
    else:
        args += bad
    done = subprocess.run([sys.executable, "-m", "pdbgym.cli", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "60"})
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert len(lines) == 1 and says in lines[0] and lines[0].startswith("error:"), done.stderr
    assert not out.exists(), "a refused command wrote its output folder"
