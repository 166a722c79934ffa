import json
from dataclasses import replace
from pathlib import Path

from pdbgym.env.environment import EpisodeResult
from pdbgym.evaluate.analysis import summarize
from pdbgym.evaluate.campaign import Arm, CampaignConfig, run_campaign
from pdbgym.evaluate.report import write_report


def _refuse(constant):
    raise ValueError(f"{constant} is not JSON")


def test_summary_json_is_strict_json_when_a_figure_does_not_exist(tiny_task, tmp_path):
    tasks = [replace(tiny_task, instance_id="t0")]

    def solve(task, run, transcript: Path) -> EpisodeResult:
        transcript.parent.mkdir(parents=True, exist_ok=True)
        transcript.write_text("{}")
        return EpisodeResult(task.instance_id, "solved", True, 1, 0.0)

    config = CampaignConfig(tasks="x", arms=[Arm("a", "scripted"), Arm("b", "scripted")], runs=1)
    rows = run_campaign(config, tasks, tmp_path / "c", episode_fns={"a": solve, "b": solve})
    summary = summarize(rows, {"a": "scripted", "b": "scripted"}, ["t0"], 1)  # one task: no spread, no SE
    write_report(summary, rows, tmp_path / "c", "t", tmp_path / "s.json")
    for path in (tmp_path / "c" / "summary.json", tmp_path / "s.json"):
        json.loads(path.read_text(), parse_constant=_refuse)
