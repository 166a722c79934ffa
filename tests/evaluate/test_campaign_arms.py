"""A campaign's arms can change without redoing the others; an arm that cannot play fails before any
episode; an arm with no finished episode does not hide the others' episodes."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from homefixtures import fresh_home
from typer.testing import CliRunner

from pdbgym.env.environment import EpisodeResult
from pdbgym.errors import PdbgymError
from pdbgym.evaluate.analysis import summarize
from pdbgym.evaluate.campaign import Arm, CampaignConfig, run_campaign
from pdbgym.evaluate.report import write_report
from pdbgym.evaluate.results import CONFIG_FILE, EpisodeRow


def _solver(calls: list):
    def run(task, run_index, transcript) -> EpisodeResult:
        calls.append((task.instance_id, run_index))
        transcript.parent.mkdir(parents=True, exist_ok=True)
        transcript.write_text("{}")
        return EpisodeResult(task.instance_id, "solved", True, 1, 0.0)

    return run


def test_an_arm_is_added_or_left_out_without_redoing_the_others(tiny_task, tmp_path):
    tasks = [replace(tiny_task, instance_id=f"t{i}") for i in range(2)]
    out = tmp_path / "c"

    def campaign(*arms: Arm) -> CampaignConfig:
        return CampaignConfig(tasks="x", arms=list(arms), runs=1)

    a_calls, b_calls, c_calls = [], [], []
    run_campaign(campaign(Arm("a", "scripted"), Arm("b", "scripted")), tasks, out,
                 episode_fns={"a": _solver(a_calls), "b": _solver(b_calls)})
    assert len(a_calls) == len(b_calls) == 2
    rows = run_campaign(campaign(Arm("a", "scripted")), tasks, out, episode_fns={"a": _solver(a_calls)})
    assert {r.arm for r in rows} == {"a"} and len(a_calls) == 2  # b left out: nothing played, a reported
    rows = run_campaign(campaign(Arm("a", "scripted"), Arm("c", "scripted")), tasks, out,
                        episode_fns={"a": _solver(a_calls), "c": _solver(c_calls)})
    assert len(a_calls) == 2 and len(c_calls) == 2 and {r.arm for r in rows} == {"a", "c"}
    assert list(json.loads((out / CONFIG_FILE).read_text())["config"]["arms"]) == ["a", "b", "c"]
    with pytest.raises(PdbgymError, match="arm a .*scripted there, embedded now"):
        run_campaign(campaign(Arm("a", "embedded")), tasks, out, episode_fns={"a": _solver(a_calls)})


def test_an_arm_without_episodes_does_not_hide_the_others():
    rows = [EpisodeRow("a", f"t{i}", 0, True, "solved", 1, 0.0, "x") for i in range(3)]
    summary = summarize(rows, {"a": "scripted", "broken": "constrained:embedded"}, ["t0", "t1", "t2"], 1)
    assert summary["tasks"] == 3 and summary["arm_results"]["a"]["solved"] == 3
    assert summary["arms_without_episodes"] == ["broken"] and "broken" in summary["warnings"][0]


def test_commands_cut_are_counted_per_arm_and_rows_from_before_are_not_read_as_none_cut(tmp_path):
    rows = [EpisodeRow("a", f"t{i}", 0, i != 0, "solved", 1, 0.0, "x", commands_cut=[2, 0, 1][i]) for i in range(3)]
    rows += [EpisodeRow("old", f"t{i}", 0, True, "solved", 1, 0.0, "x") for i in range(3)]  # commands_cut None
    summary = summarize(rows, {"a": "scripted", "old": "scripted"}, ["t0", "t1", "t2"], 1)
    assert summary["arm_results"]["a"]["commands_cut"] == {"episodes": 3, "episodes_with_cut": 2, "commands": 3}
    assert "commands_cut" not in summary["arm_results"]["old"]
    write_report(summary, rows, tmp_path, "cuts")
    text = (tmp_path / "report.md").read_text()
    assert "| a | 2 | 3 | 3 |" in text and "| old | n/a | n/a | 0 |" in text, text


@pytest.mark.slow
def test_a_constrained_arm_whose_turn_cap_is_below_the_grammar_fails_before_any_episode(tiny_task, tmp_path,
                                                                                        monkeypatch):
    from pdbgym.cli import app

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    out = tmp_path / "campaign"
    result = CliRunner().invoke(app, ["eval", "--tasks", str(tiny_task.path), "--arm", "ref=scripted",
                                      "--arm", "guided=constrained:embedded", "--max-new-tokens", "64", "--runs", "1",
                                      "--out", str(out), "--workers", "1"])
    assert result.exit_code != 0
    assert "--max-new-tokens >=" in str(result.exception) + result.output
    assert not (out / CONFIG_FILE).exists()  # the folder took no settings: the fixed command runs in it


@pytest.mark.slow
def test_cache_build_of_a_constrained_policy_below_the_grammar_fails_before_any_episode(tiny_task, tmp_path):
    from pdbgym.agent.build import CacheBuildConfig, build_cache
    from pdbgym.episode_defaults import EpisodeSettings

    with pytest.raises(PdbgymError, match="--max-new-tokens >=") as refused:
        build_cache(CacheBuildConfig(policy="constrained:embedded", out=tmp_path / "cache", tasks=str(tiny_task.path),
                                     episode=EpisodeSettings(max_new_tokens=64), workers=1))
    assert "could not run" not in str(refused.value)  # refused once, not by every episode


def test_a_merged_stack_under_another_home_is_the_same_arm_and_another_model_is_refused(tmp_path):
    """HOME/merged/<id> is named by the stack's content-addressed id: the same stack merged under another
    PDBGYM_HOME resumes the campaign; a different id (or any other folder) under the arm's name is refused."""
    from pdbgym.errors import PdbgymError
    from pdbgym.evaluate.results import ResultsStore

    node = "d97aa1e097bb0bf59faa2f8490eb983b12e1a9b727ee6b265a72c7fac63c4272"
    store = ResultsStore(tmp_path / "campaign")
    store.open({"arms": {"sft": f"/root/.pdbgym/merged/{node}"}, "runs": 1})
    store.open({"arms": {"sft": f"/tmp/other-home/merged/{node}"}, "runs": 1})  # resumes
    for other in (f"/tmp/other-home/merged/{node[:-1]}0", f"/tmp/other-home/models/{node}"):
        with pytest.raises(PdbgymError, match="arm sft"):
            store.open({"arms": {"sft": other}, "runs": 1})
