"""Campaigns: resumable, matched, honest; reports render in a real browser with working links."""

import json
import re
from html import escape
from pathlib import Path

import pytest
from browser import dump_dom, needs_chromium, screenshot
from htmlrows import assert_html_holds_markdown_tables

from pdbgym.env.environment import EpisodeResult
from pdbgym.errors import PdbgymError
from pdbgym.evaluate.analysis import summarize
from pdbgym.evaluate.campaign import Arm, CampaignConfig, run_campaign
from pdbgym.evaluate.report import write_report
from pdbgym.evaluate.results import EPISODES_FILE, ResultsStore


def _fake_tasks(tiny_task, n):
    """n distinct task objects sharing the tiny repo (ids differ), for bookkeeping tests."""
    from dataclasses import replace

    return [replace(tiny_task, instance_id=f"t{i}") for i in range(n)]


def _scripted_outcomes(solve_table):
    """An episode function with known outcomes per (task, run), writing a real transcript file."""
    calls = []

    def run(task, run_index, transcript: Path) -> EpisodeResult:
        calls.append((task.instance_id, run_index))
        transcript.parent.mkdir(parents=True, exist_ok=True)
        transcript.write_text(json.dumps({"task": task.instance_id, "run": run_index}))
        solved = solve_table[(task.instance_id, run_index)]
        return EpisodeResult(task.instance_id, "solved" if solved else "finish_unresolved", solved, 3, 0.01)

    return run, calls


def test_campaign_is_resumable_and_counts_each_episode_once(tiny_task, tmp_path):
    tasks = _fake_tasks(tiny_task, 3)
    table = {(f"t{i}", r): (i + r) % 2 == 0 for i in range(3) for r in range(2)}
    fn, calls = _scripted_outcomes(table)
    config = CampaignConfig(tasks="x", arms=[Arm("a", "scripted")], runs=2)
    rows = run_campaign(config, tasks, tmp_path / "c", episode_fns={"a": fn})
    assert len(rows) == 6 and len(calls) == 6
    # A kill mid-write leaves a cut line; a rerun repairs it and runs nothing already done.
    with open(tmp_path / "c" / EPISODES_FILE, "a") as fh:
        fh.write('{"arm": "a", "instance_id": "t0", "ru')
    fn2, calls2 = _scripted_outcomes(table)
    rows2 = run_campaign(config, tasks, tmp_path / "c", episode_fns={"a": fn2})
    assert calls2 == [] and len(rows2) == 6
    # Losing the last two lines means exactly those two episodes rerun.
    lines = (tmp_path / "c" / EPISODES_FILE).read_text().splitlines()
    (tmp_path / "c" / EPISODES_FILE).write_text("\n".join(lines[:4]) + "\n")
    fn3, calls3 = _scripted_outcomes(table)
    rows3 = run_campaign(config, tasks, tmp_path / "c", episode_fns={"a": fn3})
    assert len(calls3) == 2 and len(rows3) == 6


def test_campaign_refuses_a_folder_of_another_configuration(tiny_task, tmp_path):
    tasks = _fake_tasks(tiny_task, 1)
    fn, _ = _scripted_outcomes({("t0", 0): True, ("t0", 1): True, ("t0", 2): True})
    run_campaign(CampaignConfig(tasks="x", arms=[Arm("a", "scripted")], runs=2), tasks, tmp_path,
                 episode_fns={"a": fn})
    with pytest.raises(PdbgymError, match="differs in: runs"):
        run_campaign(CampaignConfig(tasks="x", arms=[Arm("a", "scripted")], runs=3), tasks, tmp_path,
                     episode_fns={"a": fn})


def test_a_campaign_moved_with_its_experiment_resumes_where_it_is_and_refuses_other_paths(tiny_task, tmp_path):
    """An experiment's campaigns name its task folder, split file and checkpoints by absolute path. Its folder
    copied or moved whole (another disk; a bench's arms copying one SFT stage) resumes there: the paths that
    stand to the campaign as they stood before are the same campaign's, and campaign.json takes the new ones.
    A path that does not, or a folder written before it recorded where it was, is refused as before."""
    import shutil

    tasks = _fake_tasks(tiny_task, 2)
    table = {(f"t{i}", r): True for i in range(2) for r in range(2)}

    def config(root: Path, tasks_dir: str = "tasks/val") -> CampaignConfig:
        return CampaignConfig(tasks=str(root / tasks_dir), splits_file=str(root / "splits.json"),
                              arms=[Arm("sft", str(root / "sft" / "step-64"))], runs=2)

    first = tmp_path / "first"
    for folder in (first / "tasks" / "val", first / "sft" / "step-64"):
        folder.mkdir(parents=True)
    fn, calls = _scripted_outcomes(table)
    run_campaign(config(first), tasks, first / "sft" / "val-eval", episode_fns={"sft": fn})
    assert len(calls) == 4
    second = tmp_path / "second"
    shutil.copytree(first, second)
    fn2, calls2 = _scripted_outcomes(table)
    rows = run_campaign(config(second), tasks, second / "sft" / "val-eval", episode_fns={"sft": fn2})
    assert calls2 == [] and len(rows) == 4  # resumed: nothing played again
    stored = json.loads((second / "sft" / "val-eval" / "campaign.json").read_text())
    assert stored["config"]["tasks"] == str(second / "tasks" / "val") and stored["folder"] == str((second / "sft" / "val-eval").resolve())
    with pytest.raises(PdbgymError, match="differs in: tasks"):  # the copy's campaign, another task folder
        run_campaign(config(second, "tasks/test"), tasks, second / "sft" / "val-eval", episode_fns={"sft": fn2})
    with pytest.raises(PdbgymError, match="differs in: splits_file, tasks, arm sft"):  # the first folder: not its paths
        run_campaign(config(second), tasks, first / "sft" / "val-eval", episode_fns={"sft": fn2})
    old = first / "sft" / "val-eval" / "campaign.json"
    old.write_text(json.dumps({k: v for k, v in json.loads(old.read_text()).items() if k != "folder"}))
    third = tmp_path / "third"
    shutil.copytree(first, third)
    with pytest.raises(PdbgymError, match="differs in: splits_file, tasks"):  # written before folders were recorded
        run_campaign(config(third), tasks, third / "sft" / "val-eval", episode_fns={"sft": fn2})


def test_infrastructure_failures_are_not_counted_as_unsolved(tiny_task, tmp_path):
    tasks = _fake_tasks(tiny_task, 2)

    def flaky(task, run_index, transcript):
        if task.instance_id == "t1":
            raise RuntimeError("server went away")
        return EpisodeResult(task.instance_id, "solved", True, 1, 0.0)

    with pytest.raises(PdbgymError, match="1 episode"):
        run_campaign(CampaignConfig(tasks="x", arms=[Arm("a", "scripted")], runs=1), tasks, tmp_path,
                     episode_fns={"a": flaky})
    assert [r.instance_id for r in ResultsStore(tmp_path).rows()] == ["t0"]


def test_arm_parsing_errors():
    assert Arm.parse("base=scripted").kind == "scripted"
    assert Arm.parse("srv=http://127.0.0.1:8000/v1").kind == "url"
    with pytest.raises(PdbgymError, match="NAME=MODEL"):
        Arm.parse("scripted")
    with pytest.raises(PdbgymError, match="neither scripted.* nor an adapter-store name or hash"):
        Arm.parse("x=/no/such/model")  # a store name is a model too: the message says so


def _report(tiny_task, tmp_path):
    tasks = _fake_tasks(tiny_task, 4)
    table_a = {(f"t{i}", r): i < 3 for i in range(4) for r in range(3)}
    table_b = {(f"t{i}", r): (i + r) % 3 == 0 for i in range(4) for r in range(3)}
    fa, _ = _scripted_outcomes(table_a)
    fb, _ = _scripted_outcomes(table_b)
    config = CampaignConfig(tasks="x", arms=[Arm("good", "scripted"), Arm("weak", "scripted")], runs=3)
    rows = run_campaign(config, tasks, tmp_path, episode_fns={"good": fa, "weak": fb})
    summary = summarize(rows, ["good", "weak"], [t.instance_id for t in tasks], 3)
    page = write_report(summary, rows, tmp_path, "test report", json_path=tmp_path / "s.json")
    return summary, page


def test_summary_numbers_match_hand_computation(tiny_task, tmp_path):
    summary, _ = _report(tiny_task, tmp_path)
    good = summary["arm_results"]["good"]
    assert good["pass@1"]["mean"] == pytest.approx(0.75)
    assert good["pass@3"]["mean"] == pytest.approx(0.75)
    assert good["termination_reasons"]["solved"] == 9
    weak = summary["arm_results"]["weak"]
    # weak solves run r of task i when (i + r) % 3 == 0: exactly one run of three per task.
    assert weak["pass@1"]["mean"] == pytest.approx(1 / 3)
    assert weak["pass@2"]["mean"] == pytest.approx(2 / 3)
    cmp = summary["comparisons"][0]
    assert cmp["mean_diff"] == pytest.approx(0.75 - 1 / 3)
    machine = json.loads((tmp_path / "s.json").read_text())
    assert set(machine["arms"]["good"]) >= {"pass@1", "pass@2", "pass@3"}
    assert machine["arms"]["good"]["pass@1"]["ci"][0] <= 0.75 <= machine["arms"]["good"]["pass@1"]["ci"][1]


@needs_chromium
def test_html_report_renders_in_chromium_and_links_resolve(tiny_task, tmp_path):
    _, page = _report(tiny_task, tmp_path)
    dom = dump_dom(page, tmp_path)
    assert "<h1>test report</h1>" in dom and "pass@3" in dom
    links = re.findall(r'href="([^"]+)"', dom)
    files = [link for link in links if not link.startswith("#")]
    assert len(files) == 2 * 4 * 3  # one per episode
    for link in files:
        assert (page.parent / link).is_file(), link
    for anchor in (link[1:] for link in links if link.startswith("#")):
        assert f'id="{anchor}"' in dom
    shot = screenshot(page, tmp_path, 1600)
    assert shot.is_file() and shot.stat().st_size > 10_000


def test_a_constrained_arm_names_its_folder(tmp_path):
    """``constrained:FOLDER`` is checked as FOLDER: an existing one is accepted, a missing one is named."""
    from pdbgym.errors import PdbgymError
    from pdbgym.evaluate.campaign import Arm

    folder = tmp_path / "model"
    folder.mkdir()
    assert Arm.parse(f"guided=constrained:{folder}").model == f"constrained:{folder}"
    with pytest.raises(PdbgymError, match=f"model '{tmp_path / 'missing'}' is neither"):
        Arm.parse(f"guided=constrained:{tmp_path / 'missing'}")


def test_tampered_and_verdict_refused_episodes_are_counted_per_arm_in_every_report(tiny_task, tmp_path):
    """A tampered grading counts as tampered only (even when it also refused); a refused one, not tampered, as
    verdict-refused; a grading without the ``refused`` key as neither. Markdown, HTML and JSON agree."""
    tasks = _fake_tasks(tiny_task, 2)
    gradings = {("a", "t0", 0): ("tampered", {"tampered": ["a forged end record"], "refused": ["killed: SIGKILL"]}),
                ("a", "t0", 1): ("finish_unresolved", {"tampered": [], "refused": ["no pytest closing line"]}),
                ("b", "t1", 1): ("budget", {"refused": ["the channel no longer names the original pipe"]})}

    def arm(name: str):
        def run(task, run_index, transcript: Path) -> EpisodeResult:
            transcript.parent.mkdir(parents=True, exist_ok=True)
            transcript.write_text("{}")
            reason, grading = gradings.get((name, task.instance_id, run_index), ("solved", {"tampered": []}))
            return EpisodeResult(task.instance_id, reason, reason == "solved", 3, 0.01, grading=grading)
        return run

    config = CampaignConfig(tasks="x", arms=[Arm("a", "scripted"), Arm("b", "scripted")], runs=2)
    rows = run_campaign(config, tasks, tmp_path, episode_fns={"a": arm("a"), "b": arm("b")})
    assert sorted(r.key for r in rows if r.grade_refused) == [("a", "t0", 1), ("b", "t1", 1)]
    # a row written before the field existed still loads, as not refused
    line = json.loads((tmp_path / EPISODES_FILE).read_text().splitlines()[0])
    line.pop("grade_refused")
    (tmp_path / EPISODES_FILE).write_text(json.dumps(line) + "\n")
    assert [r.grade_refused for r in ResultsStore(tmp_path).rows()] == [False]
    summary = summarize(rows, ["a", "b"], ["t0", "t1"], 2)
    a, b = summary["arm_results"]["a"], summary["arm_results"]["b"]
    assert (a["episodes"], a["tampered"], a["refused"]) == (4, 1, 1)
    assert (b["episodes"], b["tampered"], b["refused"]) == (4, 0, 1)
    page = write_report(summary, rows, tmp_path, "hacking", json_path=tmp_path / "s.json")
    markdown = (tmp_path / "report.md").read_text()
    section = markdown.split("## Tampered and verdict-refused episodes", 1)[1]
    assert "| arm | episodes | tampered | verdict-refused |" in section
    assert "| a | 4 | 1 | 1 |" in section and "| b | 4 | 0 | 1 |" in section
    assert "[!](transcripts/a/t0/run-0.json)" in markdown and "[?](transcripts/a/t0/run-1.json)" in markdown
    html = page.read_text()
    assert_html_holds_markdown_tables(markdown, html)  # every table row of report.md, cell by cell
    assert all(f"<h2>{escape(line[3:])}</h2>" in html for line in markdown.splitlines() if line.startswith("## "))
    assert "<h2>Tampered and verdict-refused episodes</h2>" in html
    assert "<tr><td>a</td><td>4</td><td>1</td><td>1</td></tr>" in html
    assert "<tr><td>b</td><td>4</td><td>0</td><td>1</td></tr>" in html
    machine = json.loads((tmp_path / "s.json").read_text())["arms"]
    assert (machine["a"]["tampered"], machine["a"]["refused"], machine["b"]["refused"]) == (1, 1, 1)
