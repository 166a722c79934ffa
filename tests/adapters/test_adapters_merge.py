"""Merging by lineage: whole chains, --onto checks, refusals, resume, and logits against PEFT's stacking."""

from __future__ import annotations

import json
import shutil

import pytest
from adapters_testkit import registered_store, shared_world, state_dict_of

from pdbgym.adapters.errors import LineageError
from pdbgym.adapters.fingerprint import weights_hash
from pdbgym.adapters.merge import MANIFEST_FILE
from pdbgym.adapters.operations import merge_ref, register_path
from pdbgym.adapters.store import Store
from pdbgym.adapters.verify import verify_folder


@pytest.fixture
def world(tmp_path_factory):
    return shared_world(tmp_path_factory)


def test_three_layer_merge_matches_peft_stacking(world, tmp_path):
    store = registered_store(world, tmp_path / "store")
    outcome, manifest = merge_ref(store, "top", tmp_path / "merged")
    assert [entry["label"].split(" ")[0] for entry in manifest["chain"]] == ["base", "sft", "rl", "top"]
    assert outcome.modules_merged == [8, 8, 8] and manifest["input_weights_hash"] == store.resolve("base")
    result = verify_folder(tmp_path / "merged")
    assert result.passed and result.relative_logit_error < 1e-5 and result.argmax_agreement == 1.0
    recorded = json.loads((tmp_path / "merged" / MANIFEST_FILE).read_text())["verification"]
    assert recorded["passed"] is True
    assert store.find_by_weights(weights_hash(tmp_path / "merged")) == [store.resolve("top")]
    assert (tmp_path / "merged" / "model.safetensors.index.json").is_file()


def test_onto_raw_base_is_the_classic_mistake_and_is_refused(world, tmp_path):
    store = registered_store(world, tmp_path / "store")
    with pytest.raises(LineageError) as caught:
        merge_ref(store, "rl", tmp_path / "out", onto=world.base)
    message = str(caught.value)
    assert "weights of base" in message and "trained against sft" in message and "never existed" in message
    assert not (tmp_path / "out").exists()


def test_onto_exact_parent_weights_is_allowed(world, tmp_path):
    store = registered_store(world, tmp_path / "store")
    # PEFT's own merge of base+SFT is bit-identical to pdbgym's in float32, so its hash is the parent's.
    merge_ref(store, "rl", tmp_path / "rl_onto", onto=world.sft_merged)
    merge_ref(store, "rl", tmp_path / "rl_chain")
    assert weights_hash(tmp_path / "rl_onto") == weights_hash(tmp_path / "rl_chain")
    # A pdbgym-merged parent is recognised from the store's record of what it wrote.
    merge_ref(store, "top", tmp_path / "top_onto", onto=tmp_path / "rl_chain")
    assert verify_folder(tmp_path / "top_onto").passed


def test_unregistered_adapter_is_refused_with_the_register_command(world, tmp_path):
    store = registered_store(world, tmp_path / "store")
    with pytest.raises(LineageError) as caught:
        merge_ref(store, str(world.rl_on_raw_base), tmp_path / "out")
    assert f"pdbgym adapters register {world.rl_on_raw_base} --parent" in str(caught.value)
    assert "not evidence" in str(caught.value)


def test_base_whose_bytes_changed_is_refused_before_publishing(world, tmp_path):
    base = tmp_path / "base"
    shutil.copytree(world.base, base)
    store = Store(tmp_path / "store")
    register_path(store, base, None, ["base"], None)
    register_path(store, world.sft, "base", ["sft"], None)
    shard = sorted(base.glob("model-*.safetensors"))[-1]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # same size, different weights: only the content hash can tell
    shard.write_bytes(bytes(data))
    with pytest.raises(LineageError, match="not .* the weights this stack was recorded against"):
        merge_ref(store, "sft", tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.partial").exists()


def test_interrupted_merge_resumes_without_redoing_finished_shards(world, tmp_path):
    store = registered_store(world, tmp_path / "store")
    shards = sorted(world.base.glob("model-*.safetensors"))
    seen = []

    def stop_in_second_shard(n: int) -> None:
        seen.append(n)
        if len(seen) > 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        merge_ref(store, "rl", tmp_path / "out", on_bytes=stop_in_second_shard)
    staging = tmp_path / ".out.partial"
    done = json.loads((staging / "progress.json").read_text())["shards"]
    assert list(done) == [shards[0].name]
    first_mtime = (staging / shards[0].name).stat().st_mtime_ns
    merge_ref(store, "rl", tmp_path / "out")
    assert (tmp_path / "out" / shards[0].name).stat().st_mtime_ns == first_mtime
    reference = tmp_path / "fresh"
    merge_ref(store, "rl", reference)
    assert weights_hash(tmp_path / "out") == weights_hash(reference)


def test_verify_fails_when_the_stack_differs_and_when_weights_were_edited(world, tmp_path):
    store = registered_store(world, tmp_path / "store")
    merge_ref(store, "rl", tmp_path / "merged")
    manifest_path = tmp_path / "merged" / MANIFEST_FILE
    manifest = json.loads(manifest_path.read_text())
    manifest["chain"][-1]["path"] = str(world.rl_on_raw_base)  # a different delta than the one merged
    manifest_path.write_text(json.dumps(manifest))
    result = verify_folder(tmp_path / "merged", record=False)
    assert not result.passed and result.relative_logit_error > 1e-3
    tensors = state_dict_of(tmp_path / "merged")
    assert tensors  # the folder is a real model
    shard = sorted((tmp_path / "merged").glob("model-*.safetensors"))[0]
    data = bytearray(shard.read_bytes())
    data[-2] ^= 0x01
    shard.write_bytes(bytes(data))
    with pytest.raises(LineageError, match="modified after merging"):
        verify_folder(tmp_path / "merged")


def test_parent_given_as_a_merged_folder_links_to_its_stack(world, tmp_path):
    store = Store(tmp_path / "store")
    register_path(store, world.base, None, ["base"], None)
    register_path(store, world.sft, "base", ["sft"], None)
    merge_ref(store, "sft", tmp_path / "sft_merged")
    result = register_path(store, world.rl, str(tmp_path / "sft_merged"), ["rl"], None)
    assert result.record["parent"] == store.resolve("sft")
    assert any("merged weights of sft" in note for note in result.notes)
    layers = [layer.node_id for layer in store.lineage(store.resolve("rl")).layers]
    assert layers == [store.resolve("base"), store.resolve("sft"), store.resolve("rl")]


def test_bf16_stack_verifies_within_the_stated_tolerance(tmp_path):
    import torch
    from adapters_testkit import add_adapter, tiny_llama

    tiny_llama(0).to(torch.bfloat16).save_pretrained(tmp_path / "base")
    sft = add_adapter(tiny_llama(0).to(torch.bfloat16), 1, use_dora=True, magnitude_drift=0.3)
    sft.save_pretrained(tmp_path / "sft")
    add_adapter(sft.merge_and_unload(), 2, use_dora=True, magnitude_drift=1e-3).save_pretrained(tmp_path / "rl")
    store = Store(tmp_path / "store")
    register_path(store, tmp_path / "base", None, ["base"], None)
    register_path(store, tmp_path / "sft", "base", ["sft"], None)
    register_path(store, tmp_path / "rl", "sft", ["rl"], None)
    merge_ref(store, "rl", tmp_path / "out")
    result = verify_folder(tmp_path / "out")
    assert result.dtype == "bfloat16" and result.passed and result.relative_logit_error > 0
