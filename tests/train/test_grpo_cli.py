"""`pdbgym train grpo` end to end on a builtin task: real episodes through TRL's rollout_func path."""

import json

import pytest
from homefixtures import fresh_home
from typer.testing import CliRunner


@pytest.mark.slow
def test_cli_grpo_step_on_a_builtin_task(tiny_model_dir, tmp_path, monkeypatch):
    from pdbgym.cli import app

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "grpo", "--policy", str(tiny_model_dir), "--tasks", "builtin__calc-lexer-hang", "--out", str(out),
        "--group", "2", "--steps", "1", "--max-new-tokens", "6", "--max-context-tokens", "4096", "--curriculum", "fixed",
        "--budget-start", "2", "--budget-end", "2", "--device", "cpu", "--save-steps", "1", "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)  # --json: stdout is the run record alone (no logged dict rows)
    assert printed["steps"] == 1 and printed["chosen"] == "final"
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["step"] == 1
    # a random model never calls a tool: both episodes fail, nothing is tampered, and only model tokens count
    # as completion tokens (at most 3 malformed turns of 6 ids; the malformed-call answers are env tokens)
    assert rows[0]["rewards/outcome/mean"] == 0.0 and rows[0]["rewards/tampered/mean"] == 0.0
    assert rows[0]["turn_budget"] == 2.0 and 0 < rows[0]["completions/max_length"] <= 3 * 6
    # where the rollouts' seconds went in the engine: its busy time covers its prefills and draws
    engine = {k.removeprefix("engine/"): v for k, v in rows[0].items() if k.startswith("engine/")}
    assert engine["decode_steps"] > 0 and engine["sessions"] >= 1 and engine["prefill_tokens"] >= engine["prefills"] >= 1
    assert 0 < engine["prefill_s"] + engine["draw_s"] <= engine["busy_s"] <= rows[0]["time/rollout_s"]
    assert 1.0 <= engine["live_rows"] <= 2.0
    record = json.loads((out / "grpo_run.json").read_text())
    assert record["steps"] == 1 and record["chosen"] == "final"
    # no group had reward spread: every advantage was 0, so the delta is kept in adapter/ but not registered
    assert record["reward_signal_steps"] == 0 and record["store_id"] is None and not record["registered"]
    assert "no step had reward spread" in record["warning"] and (out / "adapter" / "adapter_model.safetensors").is_file()
    assert rows[0]["frac_reward_zero_std"] == 1.0


def _grpo_click_command():
    import typer

    from pdbgym.cli import app

    return typer.main.get_command(app).commands["train"].commands["grpo"]


def test_every_config_field_is_a_flag_with_the_fields_help_and_default():
    """The flags are GRPORunConfig's fields, declared once: a new field is a flag with its help and default."""
    import dataclasses

    from pdbgym.train.grpo.config import GRPORunConfig

    options = {option.name: option for option in _grpo_click_command().params}
    seen = set()
    for spec in dataclasses.fields(GRPORunConfig):
        if spec.name == "extra":  # library callers only
            assert not spec.metadata["cli"] and "extra" not in options
            continue
        name = "lora" if spec.name == "use_dora" else spec.name  # --lora sets use_dora False
        option = options[name]
        assert option.help == spec.metadata["help"] and option.help, f"--{name}: help is not the field's"
        assert not option.hidden, name
        if spec.default is dataclasses.MISSING:
            assert option.required, name
        else:
            assert option.default == (not spec.default if name == "lora" else spec.default), name
        seen.add(name)
    # besides the fields: two options that are no setting of the run, and one old spelling, hidden
    assert set(options) - seen == {"keep_episodes", "json_out", "context_tokens"}
    assert options["context_tokens"].hidden and options["context_tokens"].opts == ["--context-tokens"]
    assert options["lora"].opts == ["--lora"] and not options["lora"].secondary_opts
    assert options["resume"].opts == ["--resume"] and not options["resume"].secondary_opts
    assert options["json_out"].opts == ["--json"]
    assert options["max_minutes"].min == 0 and options["pause_after_minutes"].min == 0


def test_grpo_help_is_readable():
    """Plain text in 80 columns: each flag once, its help beside it, no placeholder after a flag, no alias."""
    import dataclasses
    import re

    from pdbgym.cli import app
    from pdbgym.train.grpo.config import GRPORunConfig

    result = CliRunner().invoke(app, ["train", "grpo", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    flags = re.findall(r"^  (--[a-z-]+)", result.output, flags=re.M)
    fields = [spec for spec in dataclasses.fields(GRPORunConfig) if spec.metadata["cli"]]
    assert len(flags) == len(set(flags)) == len(fields) + 3  # --keep-episodes, --json, --help
    assert "--context-tokens" not in flags
    text = " ".join(result.output.split())
    assert "<bool>" not in text and "╭" not in text  # click's plain text, no rich panels
    assert "--lora plain LoRA delta instead of DoRA" in text and "--json print the run record as JSON" in text
    assert "--budget-start <int> the turn budget the curriculum starts at [default: 10]" in text


@pytest.mark.parametrize("args, expected", [
    ([], {}),
    (["--lora", "--resume", "--context-tokens", "4096", "--update-tokens", "0", "--no-tensorboard"],
     {"use_dora": False, "resume": True, "max_context_tokens": 4096, "update_tokens": 0}),
    (["--max-context-tokens", "2048", "--max-minutes", "1.5", "--kl-mode", "fixed"],
     {"max_context_tokens": 2048, "max_minutes": 1.5, "kl_mode": "fixed"}),
])
def test_flags_make_the_run_config(monkeypatch, tmp_path, args, expected):
    """What the command hands the trainer: the config's defaults, and each flag's value where given."""
    from pdbgym.cli import app
    from pdbgym.train.grpo import commands
    from pdbgym.train.grpo.config import GRPORunConfig

    made = []

    def train(config, show, keep_episodes):
        made.append((config, keep_episodes))
        return {"steps": 0, "max_steps": 0, "chosen": None, "adapter": None, "store_id": None}

    monkeypatch.setattr(commands, "_train_with_progress", train)
    base = ["--policy", "embedded", "--tasks", "builtin", "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(app, ["train", "grpo", *base, "--no-keep-episodes", "--json", *args])
    assert result.exit_code == 0, result.output
    assert made == [(GRPORunConfig("embedded", "builtin", tmp_path / "run", **expected), False)]
    assert json.loads(result.stdout)["steps"] == 0


@pytest.mark.parametrize("bad, says", [(["--max-minutes", "-1"], "--max-minutes"),
                                       (["--budget-end", "0"], "budget_end"), (["--update-tokens", "-1"], "update_tokens")])
def test_a_bad_value_is_refused_before_training(monkeypatch, tmp_path, bad, says):
    from pdbgym.cli import app
    from pdbgym.episode_defaults import SettingsError
    from pdbgym.train.grpo import commands

    monkeypatch.setattr(commands, "_train_with_progress", lambda *a: pytest.fail("trained with a bad value"))
    base = ["--policy", "embedded", "--tasks", "builtin", "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(app, ["train", "grpo", *base, *bad])
    refused = isinstance(result.exception, SettingsError) and says in str(result.exception)
    assert refused or (result.exit_code == 2 and says in result.output), result.output
