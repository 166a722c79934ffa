"""SWE-bench import with an instance's environment: from the row or a side file, checked, recorded, and
(with ``build_environments``) built, naming the instances that could not be set up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdbgym.sandbox.pyenv import list_environments
from pdbgym.tasks.model import load_task
from pdbgym.tasks.swebench import export_swebench, import_swebench

from envfixtures import use_fake_installer

PATCH = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"


def _checkout(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "tests" / "test_calc.py").write_text("from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n")
    return root


def _row(instance_id: str, checkout: Path, **extra: object) -> dict:
    return {"instance_id": instance_id, "patch": PATCH, "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
            "PASS_TO_PASS": [], "repo_path": str(checkout), **extra}


def test_requirements_from_the_row_or_a_side_file_and_the_ones_that_cannot_be_set_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_installer(tmp_path, monkeypatch)
    checkout = _checkout(tmp_path / "checkout")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "env-b.txt").write_text("# pinned\nonlyhere==1.0\n")
    (tmp_path / "secret.txt").write_text("onlyhere==1.0\n")
    rows = [_row("inst-a", checkout, requirements=["OnlyHere==1.0"]),
            _row("inst-b", checkout, requirements_file="env-b.txt"),
            _row("inst-none", checkout),
            _row("inst-url", checkout, requirements=["evil @ https://example.invalid/evil.whl"]),
            _row("inst-escape", checkout, requirements_file="../secret.txt"),
            _row("inst-fails", checkout, requirements=["nosuchpkg==1.0"])]
    jsonl = tmp_path / "data" / "rows.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    monkeypatch.setenv("FAKE_FAIL_ON", "nosuchpkg")
    outcomes = {o.instance_id: o for o in import_swebench(jsonl, tmp_path / "out", build_environments=True)}
    assert load_task(tmp_path / "out" / "inst-a").requirements == ["onlyhere==1.0"]
    assert load_task(tmp_path / "out" / "inst-b").requirements == ["onlyhere==1.0"]
    assert load_task(tmp_path / "out" / "inst-none").requirements is None
    assert "URL or path" in outcomes["inst-url"].error and "cannot be set up" in outcomes["inst-url"].error
    assert "not a file inside" in outcomes["inst-escape"].error
    assert "could not be set up" in outcomes["inst-fails"].error and "nosuchpkg" in outcomes["inst-fails"].error
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["inst-a", "inst-b", "inst-none"]
    assert len(list_environments()) == 1  # one environment for both instances
    export_swebench([load_task(tmp_path / "out" / "inst-a")], tmp_path / "back.jsonl")
    assert json.loads((tmp_path / "back.jsonl").read_text())["requirements"] == ["onlyhere==1.0"]
