"""`pdbgym store`: what the home folder holds, and pruning only what pdbgym rebuilds on demand."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pdbgym.cli import app


def _home(tmp_path):
    home = tmp_path / "home"
    (home / "merged" / "abc123").mkdir(parents=True)
    (home / "merged" / "abc123" / "model.safetensors").write_bytes(b"x" * 5000)
    (home / "adapters" / "nodes").mkdir(parents=True)
    (home / "adapters" / "nodes" / "n.json").write_text("{}")
    (home / "selection-ledger.jsonl").write_text("{}\n")
    return home


def test_show_lists_every_part_with_its_size_largest_first(tmp_path, monkeypatch):
    monkeypatch.setenv("PDBGYM_HOME", str(_home(tmp_path)))
    result = CliRunner().invoke(app, ["store", "show", "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)["parts"]
    assert [p["name"] for p in listed][0] == "merged" and listed[0]["bytes"] == 5000 and listed[0]["rebuildable"]
    assert {p["name"]: p["rebuildable"] for p in listed} == {"merged": True, "adapters": False,
                                                             "selection-ledger.jsonl": False}


def test_prune_removes_merged_copies_and_never_the_records(tmp_path, monkeypatch):
    home = _home(tmp_path)
    monkeypatch.setenv("PDBGYM_HOME", str(home))
    dry = CliRunner().invoke(app, ["store", "prune", "--dry-run"])
    assert dry.exit_code == 0 and "would remove" in dry.output and (home / "merged").is_dir()
    done = CliRunner().invoke(app, ["store", "prune"])
    assert done.exit_code == 0 and not (home / "merged").exists()
    refused = CliRunner().invoke(app, ["store", "prune", "adapters"])
    assert refused.exit_code != 0 and (home / "adapters" / "nodes" / "n.json").is_file()
    assert (home / "selection-ledger.jsonl").is_file()
