"""A tiny local project synthesized end to end, with kept tasks checked by running pytest independently."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_synth_fixtures import write_shop

from pdbgym.tasks.model import load_task
from pdbgym.tasks.synth.engine import STATE_DIR, STATE_FILE, SynthConfig, synthesize_source
from pdbgym.tasks.validate import validate_task

pytestmark = pytest.mark.slow


def _pytest(repo: Path, tests: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=repo,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SynthConfig, list[str]]:
    root = tmp_path_factory.mktemp("synth")
    project = write_shop(root)
    config = SynthConfig(out=root / "tasks", max_tasks=3, seed=7, workers=2, baseline_runs=2,
                         per_test_timeout_s=2.0, max_candidates=40)
    report = synthesize_source(str(project), config, lambda *args: None)
    assert report.error == ""
    return project, config, report.task_ids


def test_kept_tasks_load_and_really_fail_then_pass_with_the_patch(synthesized, tmp_path: Path) -> None:
    _, config, task_ids = synthesized
    assert len(task_ids) == 3
    failing_sets = set()
    for instance_id in task_ids:
        task = load_task(config.out / instance_id)
        assert task.source == "shop-project" and task.bug_class and task.difficulty in ("easy", "medium", "hard")
        assert task.extra["mutated_file"] == "shop/__init__.py" and task.extra["source_module"] == "shop"
        assert task.PASS_TO_PASS, "at least one test still passes"
        assert not (task.repo / "README.md").exists(), "docs are not part of a task"
        assert not list(task.repo.rglob(".*")), "no sandbox home, logs or caches left in the task repo"
        failing_sets.add(tuple(task.FAIL_TO_PASS))
        work = tmp_path / instance_id
        shutil.copytree(task.repo, work)
        for test in task.FAIL_TO_PASS:
            assert _pytest(work, [test]).returncode == 1, f"{instance_id}: {test} should fail on the buggy repo"
        assert _pytest(work, task.PASS_TO_PASS).returncode == 0
        applied = subprocess.run(["git", "apply", "-p1", "-"], cwd=work, input=task.patch, text=True,
                                 capture_output=True)
        assert applied.returncode == 0, applied.stderr
        assert _pytest(work, task.all_tests).returncode == 0, f"{instance_id}: the patch must fix every test"
        assert "tests/" not in task.patch, "the reference patch never touches tests"
        assert "--- a/shop/__init__.py\n+++ b/shop/__init__.py" in task.patch, "a/ b/ prefixes, buggy -> fixed"
    # The project's own validator (pdbgym.tasks.validate) agrees, on one task to keep the suite fast.
    report = validate_task(load_task(config.out / task_ids[0]), check_debugger=False)
    assert report.ok, report.problems
    assert len(failing_sets) == len(task_ids), "tasks are deduplicated by failing-test set"


def test_rerun_resumes_without_retesting_and_keeps_the_same_tasks(synthesized) -> None:
    project, config, task_ids = synthesized
    state_file = next((config.out / STATE_DIR).glob(f"*/{STATE_FILE}"))
    before = json.loads(state_file.read_text())
    seen: list[tuple] = []
    report = synthesize_source(str(project), config, lambda *args: seen.append(args))
    assert report.task_ids == task_ids
    assert json.loads(state_file.read_text())["tested"] == before["tested"]
    assert seen == [], "no batch had to run again"
    report_more = synthesize_source(str(project), SynthConfig(**{**config.__dict__, "max_tasks": 4}), lambda *a: None)
    assert report_more.task_ids[:3] == task_ids, "a larger --max extends the same sequence"
    published = sorted(p.name for p in config.out.iterdir() if p.is_dir() and p.name != STATE_DIR)
    assert published == sorted(report_more.task_ids)
    report_fewer = synthesize_source(str(project), SynthConfig(**{**config.__dict__, "max_tasks": 2}), lambda *a: None)
    assert report_fewer.task_ids == task_ids[:2]
    published = sorted(p.name for p in config.out.iterdir() if p.is_dir() and p.name != STATE_DIR)
    assert published == sorted(task_ids[:2]), "a smaller --max leaves only its tasks in --out"
