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
