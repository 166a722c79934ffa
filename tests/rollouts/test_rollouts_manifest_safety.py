"""A manifest cannot point a reader out of its cache, and `cache summary` refuses what `cache validate`
refuses: both through the library and through the real command line."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pdbgym.rollouts.cache import (
    MANIFEST_NAME,
    load_file_records,
    read_cache,
    read_manifest,
    save_instance_file,
)
from pdbgym.rollouts.convert import convert_cache
from pdbgym.rollouts.record import CacheFormatError
from pdbgym.rollouts.summary import summarize_cache
from pdbgym.rollouts.synthetic import make_synthetic_cache
from pdbgym.rollouts.validate import validate_cache


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pdbgym.cli", "cache", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "300"})


@pytest.fixture()
def cache(tmp_path: Path) -> Path:
    return make_synthetic_cache(tmp_path / "cache", 3, 1, vocab=500, lengths=(20, 60), seed=4)


def _point_first_entry(cache: Path, new_path: str) -> None:
    entries = json.loads((cache / MANIFEST_NAME).read_text())
    entries[0]["path"] = new_path
    (cache / MANIFEST_NAME).write_text(json.dumps(entries))


def _escape(cache: Path, how: str) -> str:
    """Move the first instance's file out of the cache and point the manifest at it ``how``."""
    first = cache / read_manifest(cache)[0].path
    outside = cache.parent / "outside"
    outside.mkdir()
    shutil.move(first, outside / "x.pt")
    if how == "dotdot":
        _point_first_entry(cache, "../outside/x.pt")
        return "../outside/x.pt"
    if how == "absolute":
        _point_first_entry(cache, str(outside / "x.pt"))
        return str(outside / "x.pt")
    (cache / "linked").symlink_to(outside)  # a link inside the cache folder that leads out of it
    _point_first_entry(cache, "linked/x.pt")
    return "linked/x.pt"


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_every_reader_refuses_a_manifest_entry_outside_the_cache(cache: Path, tmp_path: Path, how: str) -> None:
    named = _escape(cache, how)
    with pytest.raises(CacheFormatError, match=f"path '{named}'"):
        read_cache(cache)  # what divergence, training and conversion load through
    with pytest.raises(CacheFormatError, match=f"path '{named}'"):
        convert_cache(cache, tmp_path / "copy.parquet")
    with pytest.raises(CacheFormatError, match=f"path '{named}'"):
        summarize_cache(cache)
    (error,) = validate_cache(cache)
    assert f"path '{named}'" in error
    for command in ("validate", "summary"):
        done = _cli(command, str(cache))
        assert done.returncode != 0 and named in done.stdout + done.stderr, (command, done.stdout, done.stderr)


def _spoil_first_record(cache: Path, **changes: object) -> None:
    path = cache / read_manifest(cache)[0].path
    (record,) = load_file_records(path)
    save_instance_file(path, [replace(record, **changes)])


def test_summary_refuses_nan_log_probs_like_validate(cache: Path) -> None:
    (record,) = load_file_records(cache / read_manifest(cache)[0].path)
    log_probs = list(record.rollout_log_probs)
    spot = record.loss_mask.index(1)
    log_probs[spot] = math.nan
    _spoil_first_record(cache, rollout_log_probs=log_probs)
    (error,) = validate_cache(cache)
    assert "is nan" in error
    with pytest.raises(CacheFormatError, match="not summarized") as refused:
        summarize_cache(cache)
    assert error in str(refused.value)
    done = _cli("summary", str(cache), "--json")
    assert done.returncode != 0 and "is nan" in done.stderr and "nats/token" not in done.stdout


def test_summary_refuses_a_loss_mask_of_2_like_validate(cache: Path) -> None:
    (record,) = load_file_records(cache / read_manifest(cache)[0].path)
    mask = list(record.loss_mask)
    mask[0] = 2
    _spoil_first_record(cache, loss_mask=mask)
    (error,) = validate_cache(cache)
    assert "loss_mask[0] is 2" in error
    done = _cli("summary", str(cache))
    assert done.returncode != 0 and "loss_mask[0] is 2" in done.stderr


def test_a_valid_cache_still_summarizes(cache: Path) -> None:
    assert summarize_cache(cache).samples == 3
    done = _cli("summary", str(cache), "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["instances"] == 3
