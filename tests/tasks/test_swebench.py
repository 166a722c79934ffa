"""SWE-bench-style JSONL: export then import round-trips tasks; string-encoded lists and bad rows handled."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pdbgym.cli import app
from pdbgym.tasks.model import load_task, write_task
from pdbgym.tasks.swebench import export_swebench, import_swebench

PATCH = ("diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n"
         " def add(a, b):\n-    return a - b\n+    return a + b\n")


def _task(root: Path) -> Path:
    folder = root / "local__calc-1"
    (folder / "repo").mkdir(parents=True)
    (folder / "repo" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (folder / "repo" / "test_calc.py").write_text(
        "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n\ndef test_zero():\n    assert add(0, 0) == 0\n")
    write_task(folder, {"instance_id": "local__calc-1", "FAIL_TO_PASS": ["test_calc.py::test_add"],
                        "PASS_TO_PASS": ["test_calc.py::test_zero"], "patch": PATCH, "source": "handwritten",
                        "bug_class": "wrong-operator", "difficulty": "easy", "mutated_function": "add"})
    return folder


def test_export_then_import_round_trips_fields_and_repo(tmp_path: Path) -> None:
    original = load_task(_task(tmp_path / "in"))
    jsonl = tmp_path / "tasks.jsonl"
    assert export_swebench([original], jsonl) == 1
    row = json.loads(jsonl.read_text())
    assert row["FAIL_TO_PASS"] == '["test_calc.py::test_add"]', "lists are JSON strings, as SWE-bench stores them"
    assert row["repo_path"] == str(original.repo)
    outcomes = import_swebench(jsonl, tmp_path / "out")
    assert [o.error for o in outcomes] == [""]
    imported = load_task(outcomes[0].task_dir)
    assert imported.to_json() == original.to_json()
    assert imported.content_hash() == original.content_hash()


def test_import_accepts_plain_lists_applies_test_patch_and_reports_bad_rows(tmp_path: Path) -> None:
    checkout = tmp_path / "checkouts" / "calc-2"
    checkout.mkdir(parents=True)
    (checkout / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    test_patch = ("diff --git a/test_calc.py b/test_calc.py\nnew file mode 100644\n--- /dev/null\n+++ b/test_calc.py\n"
                  "@@ -0,0 +1,4 @@\n+from calc import add\n+\n+def test_add():\n+    assert add(2, 2) == 4\n")
    rows = [
        {"instance_id": "calc-2", "patch": PATCH, "FAIL_TO_PASS": ["test_calc.py::test_add"], "PASS_TO_PASS": [],
         "test_patch": test_patch, "repo": "me/calc", "base_commit": "abc123"},
        {"instance_id": "no-checkout", "patch": PATCH, "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"},
        {"instance_id": "bad-lists", "patch": PATCH, "FAIL_TO_PASS": "not json", "PASS_TO_PASS": "[]",
         "repo_path": str(checkout)},
    ]
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken\n")
    outcomes = import_swebench(jsonl, tmp_path / "out", repos_root=tmp_path / "checkouts")
    errors = {o.line: o.error for o in outcomes}
    assert errors[1] == ""
    task = load_task(tmp_path / "out" / "calc-2")
    assert (task.repo / "test_calc.py").is_file() and task.extra["base_commit"] == "abc123"
    assert "checkout" in errors[2] and "not found" in errors[2]
    assert "'FAIL_TO_PASS' is a string but not a JSON list" in errors[3]
    assert "not valid JSON" in errors[4]
    assert not (tmp_path / "out" / "bad-lists").exists()


def test_cli_round_trip(tmp_path: Path) -> None:
    _task(tmp_path / "in")
    runner = CliRunner()
    jsonl = tmp_path / "x.jsonl"
    assert runner.invoke(app, ["tasks", "export-swebench", str(tmp_path / "in"), "--out", str(jsonl), "--lists"]).exit_code == 0
    assert json.loads(jsonl.read_text())["PASS_TO_PASS"] == ["test_calc.py::test_zero"]
    result = runner.invoke(app, ["tasks", "import-swebench", str(jsonl), "--out", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["error"] == ""


def test_instance_ids_that_are_paths_are_refused_and_never_write_outside_out(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (checkout / "test_calc.py").write_text("from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n")
    ids = ["../escaped", "a/b", ".hidden", "fine-1"]
    rows = [{"instance_id": iid, "patch": PATCH, "FAIL_TO_PASS": ["test_calc.py::test_add"], "PASS_TO_PASS": [],
             "repo_path": str(checkout)} for iid in ids]
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "imports" / "out"
    outcomes = import_swebench(jsonl, out)  # "a/b" used to crash the whole run
    assert [bool(o.error) for o in outcomes] == [True, True, True, False]
    assert all("cannot name a task folder" in o.error for o in outcomes[:3])
    assert not (tmp_path / "imports" / "escaped").exists()
    assert sorted(p.name for p in out.iterdir()) == ["fine-1"]
