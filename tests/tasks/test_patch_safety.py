"""Patches are hostile text: checked before use, applied inside their folder only, and verified after."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdbgym.cli import app
from pdbgym.errors import TaskFormatError
from pdbgym.tasks.model import load_task
from pdbgym.tasks.patches import PatchEditsTestsError, UnsafePatchError, apply_patch, check_patch
from pdbgym.tasks.validate import validate_task

from taskfixtures import PATCH, make_task


def _creating(path_line: str, diff_line: str | None = None) -> str:
    """A patch creating a one-line file at the header path ``path_line`` (``+++ <path_line>``)."""
    head = f"diff --git {diff_line}\n" if diff_line else ""
    return f"{head}--- /dev/null\n+++ {path_line}\n@@ -0,0 +1 @@\n+pwned\n"


ESCAPES = {
    "dotdot": (_creating("b/../../pwned.txt", "a/../../pwned.txt b/../../pwned.txt"), "../../pwned.txt"),
    "absolute": (_creating("{outside}/pwned.txt"), "pwned.txt"),
    "absolute after the prefix": (_creating("b/{outside}/pwned.txt"), "pwned.txt"),
    "deleting outside through /dev/null": (
        "--- a/../../victim.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-keep me\n", "../../victim.txt"),
    "rename out": ("diff --git a/calc/ops.py b/calc/ops.py\nsimilarity index 100%\nrename from calc/ops.py\n"
                   "rename to ../../moved.py\n", "../../moved.py"),
    "into .git": (_creating("b/.git/hooks/post-checkout"), ".git"),
}


@pytest.mark.parametrize("case", list(ESCAPES))
def test_a_patch_leaving_its_folder_is_refused_and_nothing_is_written(tmp_path: Path, case: str) -> None:
    task_dir = make_task(tmp_path / "task")
    outside = tmp_path / "host"
    outside.mkdir()
    (tmp_path / "victim.txt").write_text("keep me\n")
    text, named = ESCAPES[case]
    patch = text.replace("{outside}", str(outside))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(UnsafePatchError, match="unsafe patch") as refused:
        apply_patch(task_dir / "repo", patch)
    assert named in str(refused.value)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "victim.txt").read_text() == "keep me\n"


def test_a_patch_through_a_symlink_is_refused(tmp_path: Path) -> None:
    repo = make_task(tmp_path / "task") / "repo"
    (tmp_path / "host").mkdir()
    (repo / "calc" / "vendor").symlink_to(tmp_path / "host")  # a link out
    (repo / "alias").symlink_to("calc")  # a link inside: git would still write through it
    for path in ("calc/vendor/evil.py", "alias/ops.py"):
        with pytest.raises(UnsafePatchError, match=f"goes through the symlink {path.rsplit('/', 1)[0]}"):
            apply_patch(repo, _creating(f"b/{path}"))
    assert list((tmp_path / "host").iterdir()) == []


def test_a_patch_creating_a_symlink_is_refused(tmp_path: Path) -> None:
    repo = make_task(tmp_path / "task") / "repo"
    link = "diff --git a/calc/up b/calc/up\nnew file mode 120000\n--- /dev/null\n+++ b/calc/up\n@@ -0,0 +1 @@\n+/etc\n"
    with pytest.raises(UnsafePatchError, match="symlink"):
        apply_patch(repo, link)
    assert not os.path.lexists(repo / "calc" / "up")


def test_a_reference_patch_editing_tests_is_refused_only_as_a_reference(tmp_path: Path) -> None:
    repo = make_task(tmp_path / "task") / "repo"
    edits_test = PATCH.replace("calc/ops.py", "tests/test_ops.py")
    with pytest.raises(PatchEditsTestsError, match=r"edits test files \['tests/test_ops.py'\]"):
        check_patch(edits_test, repo, reference=True)
    assert check_patch(edits_test, repo) == ["tests/test_ops.py"]  # a test_patch (SWE-bench) may
    assert check_patch(PATCH, repo, reference=True) == ["calc/ops.py"]


def test_apply_then_verify_and_reverse(tmp_path: Path) -> None:
    repo = make_task(tmp_path / "task") / "repo"
    apply_patch(repo, PATCH)
    assert "a - b" in (repo / "calc" / "ops.py").read_text()
    with pytest.raises(TaskFormatError, match="does not apply"):
        apply_patch(repo, PATCH)
    apply_patch(repo, PATCH, reverse=True)
    assert "a - b" not in (repo / "calc" / "ops.py").read_text()


def _git_repo_with_ignored_runs(tmp_path: Path) -> Path:
    outer = tmp_path / "clone"
    outer.mkdir()
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    (outer / ".gitignore").write_text("runs/\n")
    return outer


def test_inside_an_ignored_folder_of_a_git_repository_the_patch_still_lands(tmp_path: Path) -> None:
    outer = _git_repo_with_ignored_runs(tmp_path)
    repo = make_task(outer / "runs" / "task") / "repo"
    # What plain `git apply` does there (the synthesis bug): exit 0, file untouched.
    plain = subprocess.run(["git", "apply", "-p1", "-"], cwd=repo, input=PATCH, text=True, capture_output=True)
    assert plain.returncode == 0 and "a - b" not in (repo / "calc" / "ops.py").read_text()
    apply_patch(repo, PATCH)
    assert "a - b" in (repo / "calc" / "ops.py").read_text()


def test_a_patch_git_skipped_while_exiting_0_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The result check on its own: with git's repository discovery let back in, git skips the paths and
    # exits 0; the verification must still say the patch is not there.
    import pdbgym.tasks.patches as patches

    outer = _git_repo_with_ignored_runs(tmp_path)
    repo = make_task(outer / "runs" / "task") / "repo"
    monkeypatch.setattr(patches, "_git_env", lambda folder: dict(os.environ))
    with pytest.raises(TaskFormatError, match=r"git apply exited 0 but the patch is not in .*calc/ops.py"):
        apply_patch(repo, PATCH)


def test_a_git_repository_planted_in_the_tree_cannot_redirect_the_patch(tmp_path: Path) -> None:
    repo = make_task(tmp_path / "task") / "repo"
    elsewhere = make_task(tmp_path / "elsewhere") / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "config", "core.worktree", str(elsewhere)], check=True)
    apply_patch(repo, PATCH)
    assert "a - b" in (repo / "calc" / "ops.py").read_text()
    assert "a - b" not in (elsewhere / "calc" / "ops.py").read_text()


@pytest.mark.slow
def test_synthesis_into_a_folder_inside_a_git_repository_keeps_its_tasks(tmp_path: Path) -> None:
    from test_synth_fixtures import write_shop

    from pdbgym.tasks.synth.engine import SynthConfig, synthesize_source

    outer = _git_repo_with_ignored_runs(tmp_path)
    project = write_shop(tmp_path)
    config = SynthConfig(out=outer / "runs" / "synth", max_tasks=1, seed=7, workers=1, baseline_runs=2,
                         per_test_timeout_s=2.0, max_candidates=20)
    report = synthesize_source(str(project), config, lambda *args: None)
    assert report.error == "" and len(report.task_ids) == 1, report
    task = load_task(config.out / report.task_ids[0])
    assert task.repo.is_relative_to(outer / "runs")


def _escaping_task(tmp_path: Path, how: str) -> Path:
    if how == "patch":
        return make_task(tmp_path / "t", patch=_creating("b/../../pwned.txt"))
    task_dir = make_task(tmp_path / "t")
    (task_dir / "repo" / "calc" / "leak").symlink_to("/etc")
    return task_dir


@pytest.mark.parametrize(("how", "named", "check"), [("patch", "../../pwned.txt", "patch_stays_inside"),
                                                      ("repo", "calc/leak -> /etc", "repo_stays_inside")])
def test_validate_refuses_a_task_that_escapes_naming_the_path(tmp_path: Path, how: str, named: str,
                                                              check: str) -> None:
    task_dir = _escaping_task(tmp_path, how)
    report = validate_task(load_task(task_dir), check_debugger=False)
    assert not report.ok and report.checks[check] is False
    assert named in " ".join(report.problems)
    assert "fail_to_pass_fail_before" not in report.checks  # nothing of it ran or was copied
    assert not (tmp_path / "pwned.txt").exists()
    result = CliRunner().invoke(app, ["tasks", "validate", str(task_dir), "--no-debugger", "--json"])
    assert result.exit_code == 1 and named in result.output


@pytest.mark.slow
def test_run_refuses_a_reference_patch_that_edits_tests(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path / "t", patch=PATCH.replace("calc/ops.py", "tests/test_ops.py"))
    done = subprocess.run([sys.executable, "-m", "pdbgym.cli", "run", "--task", str(task_dir), "--sandbox", "plain",
                           "--transcript", str(tmp_path / "episode.json"), "--json"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "COLUMNS": "300"})
    assert done.returncode != 0, done.stdout
    assert "edits test files ['tests/test_ops.py']" in done.stderr
    assert '"final_test_passed"' not in done.stdout
