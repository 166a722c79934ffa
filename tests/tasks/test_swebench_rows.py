"""Rows as SWE-bench / SWE-Gym publish them (``repo`` + ``base_commit``, no checkout) imported through the real
CLI: from mirrors in each layout, or a clone cached under PDBGYM_HOME; the task's repo/ is the base commit's
tree exactly plus ``test_patch``; hostile names, commits, trees and mirror configs are refused or never run;
one bad row never stops the others; the imported tasks validate. Offline: git repositories are made here."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdbgym.cli import app
from pdbgym.sandbox.pyenv import list_environments
from pdbgym.tasks.model import load_task
from pdbgym.tasks.swebench import import_swebench

from envfixtures import use_fake_installer
from gitfixtures import git

BUGGY = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = "from calc.ops import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
MORE_TESTS = TESTS + "\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"


def _project(work: Path, repo: str) -> dict:
    """A buggy project committed, then its fix and the test exposing it; the row derived the SWE-bench way."""
    (work / "calc").mkdir(parents=True)
    (work / "tests").mkdir()
    (work / "calc" / "__init__.py").write_text("")
    (work / "calc" / "ops.py").write_text(BUGGY)
    (work / "calc" / "version.py").write_text("COMMIT = '$Format:%H$'\n")  # export-subst would rewrite it
    (work / "NOTES.txt").write_text("kept, though export-ignore\n")
    (work / ".gitattributes").write_text("calc/version.py export-subst\nNOTES.txt export-ignore\n* filter=evil\n")
    (work / "run.sh").write_text("#!/bin/sh\necho run\n")
    (work / "run.sh").chmod(0o755)
    os.symlink("calc/ops.py", work / "ops_link.py")
    (work / "tests" / "test_ops.py").write_text(TESTS)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "buggy")
    (work / "calc" / "ops.py").write_text(FIXED)
    (work / "tests" / "test_ops.py").write_text(MORE_TESTS)
    git(work, "commit", "-q", "-am", "fix sub")
    fix = git(work, "rev-parse", "HEAD").strip()
    base = git(work, "rev-parse", "HEAD^").strip()
    return {"instance_id": f"{repo.replace('/', '__')}-1", "repo": repo, "base_commit": base,
            "patch": git(work, "diff", base, fix, "--", ".", ":(exclude)tests"),
            "test_patch": git(work, "diff", base, fix, "--", "tests"),
            "FAIL_TO_PASS": json.dumps(["tests/test_ops.py::test_sub"]),
            "PASS_TO_PASS": json.dumps(["tests/test_ops.py::test_add"]),
            "environment_setup_commit": fix, "version": "0.1", "created_at": "2024-01-02T03:04:05Z",
            "problem_statement": "sub(5, 3) returns 8"}


def _expected_tree(work: Path, row: dict, into: Path) -> dict[str, tuple[int, bytes]]:
    """The base commit checked out by git itself plus test_patch: what the task's repo/ must equal."""
    git(work.parent, "clone", "-q", "--no-checkout", str(work), str(into))
    git(into, "checkout", "-q", row["base_commit"])
    git(into, "apply", data=row["test_patch"].encode())
    shutil.rmtree(into / ".git")
    return _files(into)


def _files(root: Path) -> dict[str, tuple[int, bytes]]:
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content = os.readlink(path).encode() if path.is_symlink() else b"" if path.is_dir() else path.read_bytes()
        found[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode) | (info.st_mode & 0o100), content)
    return found


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of this test's own, and clones pointed at a folder that does not exist: no network."""
    monkeypatch.setenv("PDBGYM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PDBGYM_GIT_BASE_URL", f"file://{tmp_path}/no-such-remote")
    return tmp_path


def _write(jsonl: Path, rows: list[dict]) -> Path:
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return jsonl


def test_rows_from_mirrors_in_both_layouts_hostile_rows_refused_and_the_rest_validate(offline: Path) -> None:
    tmp = offline
    row_a = _project(tmp / "work-a", "acme/calc")
    row_b = _project(tmp / "work-b", "other-org/calc2")
    mirrors = tmp / "mirrors"
    git(tmp, "clone", "-q", "--bare", str(tmp / "work-a"), str(mirrors / "acme" / "calc"))  # OWNER/NAME, bare
    git(tmp, "clone", "-q", str(tmp / "work-b"), str(mirrors / "other-org__calc2.git"))  # OWNER__NAME.git, not bare
    pwned = tmp / "pwned"
    for mirror in (mirrors / "acme" / "calc", mirrors / "other-org__calc2.git"):  # a hostile mirror's config
        git(mirror, "config", "filter.evil.smudge", f"touch {pwned}")
        git(mirror, "config", "filter.evil.required", "true")
        git(mirror, "config", "core.fsmonitor", f"touch {pwned}")
    row_b["base_commit"] = row_b["base_commit"][:12]  # abbreviated
    missing = row_a | {"instance_id": "missing-1", "repo": "nobody/absent"}
    rows = [missing, row_a, row_b,  # a failing row first: the rows after it are still imported
            row_a | {"instance_id": "dotdot-1", "repo": "../x"},
            row_a | {"instance_id": "deep-1", "repo": "a/b/c"},
            row_a | {"instance_id": "option-1", "base_commit": "--upload-pack=x"},
            row_a | {"instance_id": "unknown-commit-1", "base_commit": "deadbeef" * 5}]
    jsonl = _write(tmp / "rows.jsonl", rows)
    result = CliRunner().invoke(app, ["tasks", "import-swebench", str(jsonl), "--out", str(tmp / "out"),
                                      "--mirrors", str(mirrors), "--json"])
    assert result.exit_code == 1, result.output  # some rows failed
    outcomes = {o["instance_id"]: o for o in json.loads(result.stdout)}
    assert outcomes["acme__calc-1"]["error"] == "" and outcomes["other-org__calc2-1"]["error"] == ""
    assert "mirror" in outcomes["acme__calc-1"]["origin"]
    error = outcomes["missing-1"]["error"]
    assert "rows.jsonl:1 (missing-1)" in error and "--mirrors" in error, error
    for looked in (mirrors / "nobody" / "absent", mirrors / "nobody__absent.git", tmp / "home" / "repos"):
        assert str(looked) in error, error
    assert "field 'repo'" in outcomes["dotdot-1"]["error"] and "owner/name" in outcomes["dotdot-1"]["error"]
    assert "field 'repo'" in outcomes["deep-1"]["error"]
    assert "field 'base_commit'" in outcomes["option-1"]["error"] and "hex" in outcomes["option-1"]["error"]
    assert "not in the mirror" in outcomes["unknown-commit-1"]["error"]
    assert not pwned.exists(), "a mirror's filter or fsmonitor command ran"
    assert sorted(p.name for p in (tmp / "out").iterdir()) == ["acme__calc-1", "other-org__calc2-1"]

    task = load_task(tmp / "out" / "acme__calc-1")
    assert _files(task.repo) == _expected_tree(tmp / "work-a", row_a, tmp / "expected-a")
    assert (task.repo / "calc" / "version.py").read_text() == "COMMIT = '$Format:%H$'\n"  # byte for byte
    assert (task.repo / "NOTES.txt").is_file() and (task.repo / "ops_link.py").is_symlink()
    assert not (task.repo / ".git").exists()
    assert task.extra["environment_setup_commit"] == row_a["environment_setup_commit"]
    assert task.extra["version"] == "0.1" and task.extra["repo"] == "acme/calc"
    assert task.extra["base_commit"] == row_a["base_commit"] and "test_patch" not in task.extra
    assert task.FAIL_TO_PASS == ["tests/test_ops.py::test_sub"]
    other = load_task(tmp / "out" / "other-org__calc2-1")
    assert _files(other.repo) == _expected_tree(tmp / "work-b", row_b, tmp / "expected-b")

    checked = CliRunner().invoke(app, ["tasks", "validate", str(tmp / "out")])
    assert checked.exit_code == 0, checked.output
    assert "2/2 tasks valid" in checked.stdout


def test_table_names_each_row_and_the_json_lines_agree(offline: Path) -> None:
    tmp = offline
    row = _project(tmp / "work", "acme/calc")
    git(tmp, "clone", "-q", "--bare", str(tmp / "work"), str(tmp / "mirrors" / "acme__calc"))  # OWNER__NAME
    jsonl = _write(tmp / "rows.jsonl", [row, row | {"instance_id": "bad-1", "repo": "a/b/c"}])
    result = CliRunner().invoke(app, ["tasks", "import-swebench", str(jsonl), "--out", str(tmp / "out"),
                                      "--mirrors", str(tmp / "mirrors")])
    assert result.exit_code == 1
    assert "imported" in result.stdout and "FAIL" in result.stdout and "bad-1" in result.stdout
    assert "1/2 rows imported, 1 failed" in result.stdout


def test_without_mirrors_a_clone_is_cached_and_refreshed(offline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = offline
    row = _project(tmp / "work", "acme/calc")
    remote = tmp / "remotes" / "acme" / "calc"
    git(tmp, "clone", "-q", "--bare", str(tmp / "work"), str(remote))
    monkeypatch.setenv("PDBGYM_GIT_BASE_URL", f"file://{tmp}/remotes")
    outcomes = import_swebench(_write(tmp / "rows.jsonl", [row]), tmp / "out")
    assert [o.error for o in outcomes] == [""] and "clone" in outcomes[0].origin
    assert (tmp / "home" / "repos" / "acme__calc.git" / "objects").is_dir()
    # A later commit the cached clone lacks is fetched; the cache is used, not cloned again.
    (tmp / "work" / "calc" / "extra.py").write_text("X = 1\n")
    git(tmp / "work", "add", "-A")
    git(tmp / "work", "commit", "-q", "-m", "later")
    git(tmp / "work", "push", "-q", str(remote), "main")
    later = row | {"instance_id": "later-1", "base_commit": git(tmp / "work", "rev-parse", "HEAD").strip(),
                   "test_patch": ""}
    outcomes = import_swebench(_write(tmp / "later.jsonl", [later]), tmp / "out")
    assert [o.error for o in outcomes] == [""], outcomes
    assert (tmp / "out" / "later-1" / "repo" / "calc" / "extra.py").is_file()
    shutil.rmtree(remote)
    again = import_swebench(_write(tmp / "again.jsonl", [row | {"instance_id": "again-1"}]), tmp / "out")
    assert [o.error for o in again] == [""]  # from the cache, with the remote gone
    other = row | {"instance_id": "other-1", "repo": "acme/other"}
    refused = import_swebench(_write(tmp / "other.jsonl", [other]), tmp / "out", clone=False)
    assert "cloning is off" in refused[0].error and "--mirrors" in refused[0].error


def test_a_tree_that_plants_a_git_folder_or_climbs_out_is_refused(offline: Path) -> None:
    tmp = offline
    row = _project(tmp / "work", "acme/calc")
    work = tmp / "work"
    blob = git(work, "hash-object", "-w", "--stdin", data=b"[core]\n\tfsmonitor = touch pwned\n").strip()
    rows = []
    for name in (b".git", b".."):
        inner = git(work, "hash-object", "-w", "--literally", "-t", "tree", "--stdin",
                    data=b"100644 config\0" + bytes.fromhex(blob)).strip()
        crafted = git(work, "hash-object", "-w", "--literally", "-t", "tree", "--stdin",
                      data=b"40000 " + name + b"\0" + bytes.fromhex(inner)).strip()
        commit = git(work, "commit-tree", crafted, "-m", "crafted").strip()
        rows.append(row | {"instance_id": f"crafted-{len(rows)}", "base_commit": commit, "test_patch": ""})
    git(tmp, "clone", "-q", "--bare", str(work), str(tmp / "mirrors" / "acme" / "calc.git"))  # OWNER/NAME.git
    for commit in (r["base_commit"] for r in rows):  # unreachable objects: copy them over with a ref
        git(work, "update-ref", f"refs/crafted/{commit}", commit)
        git(work, "push", "-q", str(tmp / "mirrors" / "acme" / "calc.git"), f"refs/crafted/{commit}")
    outcomes = import_swebench(_write(tmp / "rows.jsonl", rows + [row]), tmp / "out", mirrors=tmp / "mirrors")
    assert "could leave the task's repo/" in outcomes[0].error and "'.git/config'" in outcomes[0].error
    assert "could leave the task's repo/" in outcomes[1].error and "'../config'" in outcomes[1].error
    assert outcomes[2].error == ""
    assert sorted(p.name for p in (tmp / "out").iterdir()) == ["acme__calc-1"]
    assert not (tmp / "config").exists() and not (tmp / "out" / "config").exists()


def test_build_envs_builds_each_environment_and_reports_the_one_that_fails(
        offline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = offline
    use_fake_installer(tmp, monkeypatch)
    monkeypatch.setenv("FAKE_FAIL_ON", "nosuchpkg")
    row = _project(tmp / "work", "acme/calc")
    git(tmp, "clone", "-q", "--bare", str(tmp / "work"), str(tmp / "mirrors" / "acme" / "calc"))
    rows = [row | {"instance_id": "needs-missing", "requirements": ["nosuchpkg==1.0"]},
            row | {"requirements": ["onlyhere==1.0"]}]
    result = CliRunner().invoke(app, ["tasks", "import-swebench", str(_write(tmp / "rows.jsonl", rows)), "--out",
                                      str(tmp / "out"), "--mirrors", str(tmp / "mirrors"), "--build-envs", "--json"])
    assert result.exit_code == 1, result.output
    outcomes = {o["instance_id"]: o["error"] for o in json.loads(result.stdout)}
    assert "could not be set up" in outcomes["needs-missing"] and "nosuchpkg" in outcomes["needs-missing"]
    assert outcomes["acme__calc-1"] == ""
    assert [e.requirements for e in list_environments()] == [["onlyhere==1.0"]]
    assert sorted(p.name for p in (tmp / "out").iterdir()) == ["acme__calc-1"]
