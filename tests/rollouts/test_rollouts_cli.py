"""`pdbgym cache validate|summary|convert`, through typer's runner and one real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from pdbgym.cli import app
from pdbgym.rollouts.cache import CACHE_DIR_ENV, read_cache, read_manifest
from pdbgym.rollouts.compare import record_differences
from pdbgym.rollouts.synthetic import make_synthetic_cache

runner = CliRunner()


@pytest.fixture()
def cache(tmp_path: Path) -> Path:
    return make_synthetic_cache(tmp_path / "cache", 4, 2, vocab=800, lengths=(30, 300), seed=2)


def test_validate_passes_then_fails_with_exit_1_listing_problems(cache: Path) -> None:
    ok = runner.invoke(app, ["cache", "validate", str(cache), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["errors"] == []
    too_small = runner.invoke(app, ["cache", "validate", str(cache), "--vocab-size", "10", "--json"])
    assert too_small.exit_code == 1
    errors = json.loads(too_small.output)["errors"]
    assert len(errors) == 8 and all("set by the given vocab size" in e for e in errors)
    table = runner.invoke(app, ["cache", "validate", str(cache), "--vocab-size", "10", "--show", "1"])
    assert table.exit_code == 1 and "and 7 more" in table.output


def test_summary_json_and_table(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(cache))
    as_json = runner.invoke(app, ["cache", "summary", "--json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.output)
    assert data["instances"] == 4 and data["samples"] == 8 and data["cache_dir"] == str(cache)
    table = runner.invoke(app, ["cache", "summary"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and data["termination_line"] in table.output


def test_convert_both_ways(cache: Path, tmp_path: Path) -> None:
    to_parquet = runner.invoke(app, ["cache", "convert", str(cache), str(tmp_path / "c.parquet"), "--json"])
    assert to_parquet.exit_code == 0, to_parquet.output
    assert json.loads(to_parquet.output) | {} == {"source": str(cache), "destination": str(tmp_path / "c.parquet"),
                                                  "records": 8, "verified": True}
    back = runner.invoke(app, ["cache", "convert", str(tmp_path / "c.parquet"), str(tmp_path / "back")])
    assert back.exit_code == 0 and "verified identical" in back.output
    for got, want in zip(read_cache(tmp_path / "back"), read_cache(cache), strict=True):
        assert record_differences(got, want) == []


def run_cli(*args: str, env_dir: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != CACHE_DIR_ENV}
    if env_dir is not None:
        env[CACHE_DIR_ENV] = env_dir
    return subprocess.run([sys.executable, "-m", "pdbgym.cli", "cache", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_real_process_reports_a_missing_cache_variable_without_traceback() -> None:
    unset = run_cli("summary", env_dir=None)
    assert unset.returncode == 2 and CACHE_DIR_ENV in unset.stderr and "Traceback" not in unset.stderr


def test_a_broken_file_is_listed_by_validate(cache: Path) -> None:
    torch.save({"not": "a record"}, cache / read_manifest(cache)[0].path)
    bad = runner.invoke(app, ["cache", "validate", str(cache)], env={"COLUMNS": "80"})
    assert bad.exit_code == 1
    assert "lacks teacher-cache field(s) ['instance_id', 'dataset', 'tokens'" in bad.output


def test_a_single_parquet_file_is_validated_and_summarized(cache: Path, tmp_path: Path) -> None:
    single = tmp_path / "c.parquet"
    assert runner.invoke(app, ["cache", "convert", str(cache), str(single)]).exit_code == 0
    ok = runner.invoke(app, ["cache", "validate", str(single), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["errors"] == []
    too_small = runner.invoke(app, ["cache", "validate", str(single), "--vocab-size", "10", "--json"])
    assert too_small.exit_code == 1 and len(json.loads(too_small.output)["errors"]) == 8
    summary = runner.invoke(app, ["cache", "summary", str(single), "--json"])
    assert summary.exit_code == 0, summary.output
    assert (json.loads(summary.output)["instances"], json.loads(summary.output)["samples"]) == (4, 8)
    for command in ("validate", "summary"):  # piped: its progress counts the one file, never '0/?' at the end
        shown = run_cli(command, str(single), env_dir=None)
        assert shown.returncode == 0 and shown.stderr.splitlines()[-1].split(" elapsed")[0].endswith("] 1/1"), \
            shown.stderr


def test_a_corrupted_manifest_is_rebuilt_from_the_files(cache: Path) -> None:
    before = read_cache(cache)
    (cache / "manifest.json").write_text('[{"dataset": "syn", "instance_id"')  # a write cut short
    broken = runner.invoke(app, ["cache", "validate", str(cache), "--json"])
    assert broken.exit_code == 1 and "pdbgym cache repair" in json.loads(broken.output)["errors"][0]
    repaired = runner.invoke(app, ["cache", "repair", str(cache), "--json"])
    assert repaired.exit_code == 0, repaired.output
    assert json.loads(repaired.output)["entries"] == 4 and (cache / "manifest.json.bad").is_file()
    assert runner.invoke(app, ["cache", "validate", str(cache)]).exit_code == 0
    assert sorted((r.instance_id, r.sample_idx) for r in read_cache(cache)) == \
        sorted((r.instance_id, r.sample_idx) for r in before)
