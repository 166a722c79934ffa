"""Wrong-site fixation as a metric: the rule on real edits, episodes through the real env, the report's rate."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from homefixtures import fresh_home

from pdbgym.agent.scripted import ScriptedPolicy
from pdbgym.env.environment import DebugEnv, EnvConfig, EpisodeResult
from pdbgym.env.tools import Action
from pdbgym.evaluate.analysis import summarize
from pdbgym.evaluate.campaign import Arm, CampaignConfig, run_campaign
from pdbgym.evaluate.report import write_report
from pdbgym.tasks.model import Task, load_task
from pdbgym.tasks.patches import apply_patch, parse_patch
from pdbgym.tasks.suites import SUITES, find_task_dirs
from pdbgym.tasks.wrongsite import MAX_FILE_BYTES, has_wrong_site_info, wrong_site_outcome, wrong_sites

REGRESSION = [load_task(d) for d in find_task_dirs(SUITES["regression"])]
WITH_PATCH = [t for t in REGRESSION if "wrong_site_patch" in t.extra]


def _copy(task: Task, tmp_path: Path, patch: str | None = None) -> Path:
    workspace = tmp_path / "ws"
    shutil.copytree(task.repo, workspace)
    if patch is not None:
        apply_patch(workspace, patch)
    return workspace


@pytest.mark.parametrize("task", WITH_PATCH, ids=lambda t: t.instance_id)
def test_wrong_site_patch_touches_and_reference_fix_does_not(task, tmp_path):
    assert has_wrong_site_info(task) and wrong_sites(task)
    assert wrong_site_outcome(task, _copy(task, tmp_path / "none"))["touched"] is False
    assert wrong_site_outcome(task, _copy(task, tmp_path / "ref", task.patch))["touched"] is False
    outcome = wrong_site_outcome(task, _copy(task, tmp_path / "wrong", task.extra["wrong_site_patch"]))
    assert outcome["touched"] is True and outcome["touched_sites"]


def test_tasks_without_wrong_site_information_give_none(tiny_task, tmp_path):
    assert not has_wrong_site_info(tiny_task)
    assert wrong_site_outcome(tiny_task, _copy(tiny_task, tmp_path)) is None


@pytest.fixture
def add_site(tiny_task):
    """The tiny calculator with ``add`` (lines 1-2 of calc/ops.py) declared as its wrong site."""
    return replace(tiny_task, extra={"wrong_site": [{"path": "calc/ops.py", "function": "add"}]})


def _ops(workspace: Path, text: str) -> None:
    (workspace / "calc" / "ops.py").write_text(text)


ORIGINAL = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n"
EDITS = {  # final calc/ops.py -> touched?
    "body edited": ("def add(a, b):\n    return b + a\n\n\ndef sub(a, b):\n    return a + b\n", True),
    "edited then undone": (ORIGINAL, False),
    "only sub fixed": (ORIGINAL.replace("return a + b\n", "return a - b\n", 2).replace("return a - b", "return a + b", 1),
                       False),
    "body extended at its end": ("def add(a, b):\n    return a + b\n    print('x')\n\n\ndef sub(a, b):\n"
                                 "    return a + b\n", True),
    "new function after it": ("def add(a, b):\n    return a + b\ndef helper():\n    pass\n\n\ndef sub(a, b):\n"
                              "    return a + b\n", False),
    "decorator added": ("@staticmethod\ndef add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n", True),
    "comment above it": ("# adds\ndef add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n", False),
}


@pytest.mark.parametrize("name", list(EDITS))
def test_rule_judges_the_final_edits_in_original_coordinates(add_site, tmp_path, name):
    text, touched = EDITS[name]
    workspace = _copy(add_site, tmp_path)
    _ops(workspace, text)
    assert wrong_site_outcome(add_site, workspace)["touched"] is touched
    assert wrong_site_outcome(add_site, workspace)["sites"] == ["calc/ops.py:1-2 (add)"]


def test_links_and_huge_files_are_judged_without_following_or_reading(add_site, tmp_path):
    # The site file swapped for a link to an untouched copy: not followed, so it counts as touched.
    workspace = _copy(add_site, tmp_path / "a")
    os.remove(workspace / "calc" / "ops.py")
    os.symlink(add_site.repo / "calc" / "ops.py", workspace / "calc" / "ops.py")
    assert wrong_site_outcome(add_site, workspace)["touched"] is True
    # A folder on the way swapped for a link to a pristine copy elsewhere: likewise.
    workspace = _copy(add_site, tmp_path / "b")
    shutil.rmtree(workspace / "calc")
    os.symlink(add_site.repo / "calc", workspace / "calc")
    assert wrong_site_outcome(add_site, workspace)["touched"] is True
    # A file grown past the cap is not read at all; a deleted one is touched too.
    workspace = _copy(add_site, tmp_path / "c")
    _ops(workspace, ORIGINAL + "#" * MAX_FILE_BYTES)
    assert wrong_site_outcome(add_site, workspace)["touched"] is True
    os.remove(workspace / "calc" / "ops.py")
    assert wrong_site_outcome(add_site, workspace)["touched"] is True


def test_a_malformed_declaration_reports_an_error_and_no_outcome(tiny_task, tmp_path):
    task = replace(tiny_task, extra={"wrong_site": [{"path": "calc/ops.py", "function": "mul"}]})
    outcome = wrong_site_outcome(task, _copy(task, tmp_path))
    assert outcome["touched"] is None and "0 functions named 'mul'" in outcome["error"]
    assert EpisodeResult("x", "solved", True, 1, 0.1, wrong_site=outcome).wrong_site_touched is None


class WrongSitePolicy:
    """Edits the task's wrong site (the hunks of its ``wrong_site_patch``, bottom-up) and submits."""

    name = "symptom"

    def reset(self, task: Task, observation: str) -> None:
        patch = task.extra.get("wrong_site_patch")
        hunks = [(h.path, *h.changed_span()) for h in parse_patch(patch)] if patch else []
        self._actions = iter([
            *(Action("edit", {"path": path, "start": first, "end": last,
                              "new_text": "".join(line + "\n" for line in new)})
              for path, first, last, new in sorted(hunks, key=lambda s: (s[0], -s[1]))),
            Action("submit", {}),
        ])

    def next_action(self, observation: str) -> Action:
        return next(self._actions)


def _episode_fn(policy_factory):
    def play(task: Task, run_index: int, transcript: Path) -> EpisodeResult:
        policy = policy_factory()
        with DebugEnv(task, EnvConfig(turn_budget=20)) as env:
            observation = env.reset()
            policy.reset(task, observation)
            while not (step := env.step(policy.next_action(observation))).done:
                observation = step.observation
            env.write_transcript(transcript)
            assert env.result is not None
            return env.result
    return play


@pytest.mark.slow
def test_campaign_records_wrong_site_per_episode_and_reports_the_rate(tiny_task, tmp_path):
    tasks = [t for t in WITH_PATCH if t.instance_id in ("regression__log-syslog-utc",
                                                        "regression__site-slug-trailing-dash")] + [tiny_task]
    config = CampaignConfig(tasks="mixed", arms=[Arm("ref", "scripted"), Arm("symptom", "scripted")], runs=1)
    out = tmp_path / "c"
    rows = run_campaign(config, tasks, out, episode_fns={"ref": _episode_fn(ScriptedPolicy),
                                                         "symptom": _episode_fn(WrongSitePolicy)})
    by_key = {(r.arm, r.instance_id): r for r in rows}
    for task in tasks[:2]:
        ref, symptom = by_key[("ref", task.instance_id)], by_key[("symptom", task.instance_id)]
        assert ref.final_test_passed and ref.wrong_site_touched is False
        # The tempting fix at the raise site breaks a contract test: unsolved, and wrong-site.
        assert not symptom.final_test_passed and symptom.wrong_site_touched is True
        transcript = json.loads((out / symptom.transcript).read_text())
        assert transcript["result"]["wrong_site"]["touched_sites"]
    assert by_key[("ref", tiny_task.instance_id)].wrong_site_touched is None  # no info: not in the rate

    summary = summarize(rows, {"ref": "scripted", "symptom": "scripted"}, [t.instance_id for t in tasks], 1)
    ref_rate, symptom_rate = (summary["arm_results"][a]["wrong_site"] for a in ("ref", "symptom"))
    assert symptom_rate["episodes"] == 2 and symptom_rate["touched"] == 2 and len(symptom_rate["tasks"]) == 2
    assert symptom_rate["rate"]["mean"] == 1.0 and symptom_rate["rate"]["ci"][0] < 1.0  # n/n: never zero width
    assert ref_rate["rate"]["mean"] == 0.0 and ref_rate["rate"]["ci"][1] > 0.0
    write_report(summary, rows, out, "wrong-site", tmp_path / "m.json")
    markdown = (out / "report.md").read_text()
    section = markdown[markdown.index("## Wrong-site fixation"):]
    assert "| symptom | 100.0 [" in section and "| 2 / 2 | 2 |" in section and "| ref | 0.0 [0.0, " in section
    assert "Wrong-site rate" in markdown and "Wrong-site fixation" in (out / "report.html").read_text()
    machine = json.loads((tmp_path / "m.json").read_text())
    assert machine["arms"]["symptom"]["wrong_site"]["rate"]["mean"] == 1.0


@pytest.mark.slow
def test_eval_through_the_executor_keeps_wrong_site_in_row_record_and_transcript(tmp_path, monkeypatch):
    """`pdbgym eval` with the scripted arm on a task whose declared wrong site is the function it fixes."""
    from typer.testing import CliRunner

    from pdbgym.cli import app
    from pdbgym.rollouts.cache import read_cache

    from taskfixtures import make_task

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    task_dir = make_task(tmp_path / "task", wrong_site=[{"path": "calc/ops.py", "function": "sub"}])
    out = tmp_path / "campaign"
    result = CliRunner().invoke(app, ["eval", "--tasks", str(task_dir), "--arm", "ref=scripted", "--runs", "1",
                                      "--out", str(out), "--json", str(tmp_path / "s.json")])
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert row["wrong_site_touched"] is True and row["final_test_passed"] is True
    (record,) = read_cache(out / "cache" / "ref")
    assert record.metadata["wrong_site_touched"] is True
    transcript = json.loads((out / row["transcript"]).read_text())
    assert transcript["env"]["result"]["wrong_site"]["touched_sites"] == ["calc/ops.py:5-6 (sub)"]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["arms"]["ref"]["wrong_site"]["touched"] == 1


@pytest.mark.parametrize("task", REGRESSION, ids=lambda t: t.instance_id)
def test_every_regression_task_declares_a_site_its_reference_fix_leaves_alone(task, tmp_path):
    assert has_wrong_site_info(task)
    assert wrong_site_outcome(task, _copy(task, tmp_path, task.patch))["touched"] is False


_FRAME = re.compile(r"^(?P<path>\S+\.py):(?P<line>\d+): in \S+$", re.MULTILINE)


def _innermost_code_frame(output: str, task: Task) -> tuple[str, int]:
    """(repo-relative file, line) of the last traceback frame outside the test files (pytest --tb=short)."""
    frames = []
    for frame in _FRAME.finditer(output):
        parts = Path(frame["path"]).parts
        relative = next((Path(*parts[i:]).as_posix() for i in range(len(parts))
                         if (task.repo / Path(*parts[i:])).is_file()), None)
        if relative is not None and relative not in task.test_files:
            frames.append((relative, int(frame["line"])))
    assert frames, output[-2000:]
    return frames[-1]


EXPLICIT = [t for t in REGRESSION if "wrong_site" in t.extra]


@pytest.mark.slow
@pytest.mark.parametrize("task", EXPLICIT, ids=lambda t: t.instance_id)
def test_an_explicit_wrong_site_is_where_the_failing_test_raises(task):
    """The declared site holds the innermost frame of the first failing test: where pdb lands first."""
    from pdbgym.grading.testrun import run_tests
    from pdbgym.sandbox import Workspace, get_sandbox

    short = replace(task, test_command=f"{task.test_command} --tb=short")
    with Workspace.create(task.repo) as workspace:
        run = run_tests(get_sandbox(), workspace.path, short, task.FAIL_TO_PASS[:1])
    path, line = _innermost_code_frame(run.output, task)
    (site,) = wrong_sites(task)
    assert (path, site.first_line <= line <= site.last_line) == (site.path, True), (path, line, site)


@pytest.mark.parametrize("declared", [
    [{"path": "../outside.py", "function": "add"}],
    [{"path": "/etc/hostname", "function": "add"}],
    [{"path": "calc/link.py", "function": "add"}],
])
def test_a_site_path_that_leaves_the_repo_is_refused(tiny_task, tmp_path, declared):
    (tiny_task.path / "outside.py").write_text("def add(a, b):\n    return a\n")
    os.symlink(tiny_task.path / "outside.py", tiny_task.repo / "calc" / "link.py")
    task = replace(tiny_task, extra={"wrong_site": declared})
    outcome = wrong_site_outcome(task, _copy(task, tmp_path))
    assert outcome["touched"] is None and ("relative to repo/" in outcome["error"] or "outside" in outcome["error"])
