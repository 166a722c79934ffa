"""A repository and a row as SWE-bench publishes them, built with git in a test: the buggy commit, then the
fix and the tests exposing it; the row names ``repo`` and ``base_commit`` (the fix's parent), ``patch`` (the
source diff) and ``test_patch`` (the test diff)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path


def git_env() -> dict[str, str]:
    """git without the machine's configuration, with a fixed author."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return env | {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t",
                  "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(cwd: Path, *args: str, data: bytes | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, input=data, capture_output=True, env=git_env(), check=True)
    return proc.stdout.decode()


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def published_row(work: Path, repo: str, buggy: dict[str, str], fixed: dict[str, str], source: str,
                  fail_to_pass: list[str], pass_to_pass: list[str]) -> dict:
    """Commit ``buggy`` (repo-relative files) in a new repository at ``work``, then ``fixed`` over it; the
    row of that fix, its ``patch`` the diff under ``source`` and its ``test_patch`` the diff under tests/."""
    _write(work, buggy)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "buggy")
    _write(work, fixed)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "fix")
    return {"instance_id": f"{repo.replace('/', '__')}-1", "repo": repo, "base_commit": git(work, "rev-parse", "HEAD^").strip(),
            "patch": git(work, "diff", "HEAD^", "HEAD", "--", source),
            "test_patch": git(work, "diff", "HEAD^", "HEAD", "--", "tests"),
            "FAIL_TO_PASS": json.dumps(fail_to_pass), "PASS_TO_PASS": json.dumps(pass_to_pass), "version": "0.1",
            "environment_setup_commit": git(work, "rev-parse", "HEAD").strip()}
