"""`pdbgym eval` end to end on a real task with the scripted policy, and its refusals."""

import json

import pytest
from homefixtures import fresh_home
from typer.testing import CliRunner

from pdbgym.cli import app
from pdbgym.evaluate.selection import SelectionLedger, record_selection


@pytest.mark.slow
def test_eval_runs_a_campaign_and_writes_reports(tiny_task, tmp_path, monkeypatch):
    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    out = tmp_path / "campaign"
    args = ["eval", "--tasks", str(tiny_task.path), "--arm", "ref=scripted", "--runs", "2", "--out", str(out),
            "--json", str(tmp_path / "s.json"), "--k", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["arms"]["ref"]["pass@1"]["mean"] == 1.0 and "pass@2" in summary["arms"]["ref"]
    assert (out / "report.html").is_file() and (out / "report.md").is_file() and (out / "pass_at_k.png").is_file()
    # every row counts the pdb commands its episode had cut by the time limit (the oracle's: none)
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert [r["commands_cut"] for r in rows] == [0, 0]
    assert summary["arms"]["ref"]["commands_cut"] == {"episodes": 2, "episodes_with_cut": 0, "commands": 0}
    assert "pdb commands cut by the time limit" in (out / "report.md").read_text()
    assert CliRunner().invoke(app, ["eval", "report", str(out)]).exit_code == 0

    # The same folder with other settings is refused, naming what differs; nothing is lost.
    before = (out / "episodes.jsonl").read_text()
    result = CliRunner().invoke(app, [*args[:6], "3", *args[7:9]])
    assert result.exit_code != 0 and "differs in: runs" in str(result.exception)
    assert (out / "episodes.jsonl").read_text() == before


@pytest.mark.slow
def test_eval_refuses_a_split_that_selected_the_arm(tiny_task, tmp_path, monkeypatch):
    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    record_selection("val", [tiny_task.instance_id], {"scripted": 0.9, "other": 0.5}, 0.05,
                     ledger=SelectionLedger())
    args = ["eval", "--tasks", str(tiny_task.path), "--arm", "ref=scripted", "--runs", "1", "--out",
            str(tmp_path / "c")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0 and "refusing to report" in str(result.exception)
    result = CliRunner().invoke(app, [*args, "--force"])
    assert result.exit_code == 0, result.output
    assert "selection bias" in (tmp_path / "c" / "report.md").read_text()


def test_eval_bad_input_is_refused_before_any_episode(tiny_task, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["eval", "--tasks", str(tiny_task.path), "--arm", "x=/no/such/model",
                                 "--out", str(tmp_path / "c")])
    assert result.exit_code != 0 and "neither scripted" in str(result.exception)
    result = runner.invoke(app, ["eval", "--tasks", str(tiny_task.path), "--arm", "x=scripted", "--runs", "2",
                                 "--k", "5", "--out", str(tmp_path / "c")])
    assert result.exit_code != 0 and "pass@5 needs at least 5 runs" in str(result.exception)
    assert not (tmp_path / "c").exists()
