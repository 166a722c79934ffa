"""Broken artifacts give errors that name the file and say what to do; the CLI prints them without a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from adapters_testkit import shared_world
from homefixtures import fresh_home

from pdbgym.adapters.errors import CorruptArtifactError
from pdbgym.adapters.fingerprint import open_model_folder
from pdbgym.adapters.operations import register_path
from pdbgym.adapters.peft_format import load_adapter
from pdbgym.adapters.store import Store


@pytest.fixture
def world(tmp_path_factory):
    return shared_world(tmp_path_factory)


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def test_truncated_adapter_safetensors(world, tmp_path):
    adapter = _copy(world.rl, tmp_path / "rl")
    weights = adapter / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(CorruptArtifactError, match="past the end of file") as caught:
        load_adapter(adapter)
    assert "adapter_model.safetensors" in str(caught.value) and "re-save" in str(caught.value)


def test_file_shorter_than_header(world, tmp_path):
    adapter = _copy(world.rl, tmp_path / "rl")
    (adapter / "adapter_model.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(CorruptArtifactError, match="shorter than the 8-byte header"):
        load_adapter(adapter)


def test_bad_adapter_config_json(world, tmp_path):
    adapter = _copy(world.rl, tmp_path / "rl")
    (adapter / "adapter_config.json").write_text('{"r": 4, "lora_alpha":')
    with pytest.raises(CorruptArtifactError, match="adapter_config.json: adapter config is not valid JSON"):
        load_adapter(adapter)


def test_config_missing_rank(world, tmp_path):
    adapter = _copy(world.rl, tmp_path / "rl")
    (adapter / "adapter_config.json").write_text('{"peft_type": "LORA", "lora_alpha": 8}')
    with pytest.raises(CorruptArtifactError, match="field 'r' is missing"):
        load_adapter(adapter)


def test_truncated_model_shard_and_bad_index(world, tmp_path):
    base = _copy(world.base, tmp_path / "base")
    index = base / "model.safetensors.index.json"
    index.write_text("not json")
    with pytest.raises(CorruptArtifactError, match="shard index is not valid JSON"):
        open_model_folder(base)
    shutil.copy2(world.base / index.name, index)
    shard = sorted(base.glob("model-*.safetensors"))[1]
    shard.write_bytes(shard.read_bytes()[:50])
    with pytest.raises(CorruptArtifactError, match=shard.name):
        register_path(Store(tmp_path / "store"), base, None, [], None)


def test_cli_prints_error_without_traceback(world, tmp_path):
    adapter = _copy(world.rl, tmp_path / "rl")
    (adapter / "adapter_config.json").write_text("{broken")
    env = {**os.environ, "PDBGYM_HOME": str(fresh_home(tmp_path / "home"))}
    proc = subprocess.run(
        [sys.executable, "-m", "pdbgym.cli", "adapters", "register", str(adapter), "--parent", "x" * 64],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 2
    assert "not valid JSON" in proc.stderr and "Traceback" not in proc.stderr


def test_stored_adapter_whose_bytes_changed_at_the_same_size_is_not_merged(world, tmp_path):
    from adapters_testkit import registered_store

    from pdbgym.adapters.operations import merge_ref

    store = registered_store(world, tmp_path / "store")
    weights = store.object_dir(store.resolve("sft")) / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF  # inside the last tensor: same size, so only a content check can see it
    weights.write_bytes(bytes(data))
    assert store.lineage(store.resolve("rl")).servable, "lineage checks sizes only"
    with pytest.raises(CorruptArtifactError, match=r"stored copy of sft .* has changed since registration"):
        merge_ref(store, "rl", tmp_path / "merged")
    assert not (tmp_path / "merged").exists()
