"""The lineage store: chains of two and three layers, missing parents, names, conflicts."""

from __future__ import annotations

import pytest
from adapters_testkit import registered_store, shared_world

from pdbgym.adapters.errors import AdapterError, LineageError
from pdbgym.adapters.operations import register_path
from pdbgym.adapters.peft_format import adapter_content_hash, load_adapter
from pdbgym.adapters.store import Store


@pytest.fixture
def world(tmp_path_factory):
    return shared_world(tmp_path_factory)


def test_three_layer_chain_is_servable_in_order(world, tmp_path):
    store = registered_store(world, tmp_path / "store")
    lineage = store.lineage(store.resolve("top"))
    assert [store.label(layer.node_id).split(" ")[0] for layer in lineage.layers] == ["base", "sft", "rl", "top"]
    assert lineage.servable and lineage.problems == []
    assert store.get(store.resolve("sft"))["recipe"] == {"seed": 42, "rank": 4}
    assert store.get(store.resolve("rl"))["parent"] == store.resolve("sft")


def test_two_layer_chain_and_hash_prefix(world, tmp_path):
    store = Store(tmp_path / "store")
    base = register_path(store, world.base, None, ["base"], None).record["id"]
    sft = register_path(store, world.sft, base[:10], [], None).record["id"]
    assert store.resolve(sft[:8]) == sft
    assert [layer.node_id for layer in store.lineage(sft).layers] == [base, sft]


def test_missing_parent_is_unservable_until_registered(world, tmp_path):
    store = Store(tmp_path / "store")
    register_path(store, world.base, None, ["base"], None)
    sft_hash = adapter_content_hash(load_adapter(world.sft))
    result = register_path(store, world.rl, sft_hash, ["rl"], None)
    assert any("UNSERVABLE" in note for note in result.notes)
    lineage = store.lineage(store.resolve("rl"))
    assert not lineage.servable
    assert lineage.layers[0].node_id == sft_hash and lineage.layers[0].record is None
    assert "not in the store" in lineage.problems[0]
    with pytest.raises(LineageError, match="unservable"):
        from pdbgym.adapters.operations import merge_ref

        merge_ref(store, "rl", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    register_path(store, world.sft, "base", ["sft"], None)
    assert store.lineage(store.resolve("rl")).servable


def test_parent_that_exists_nowhere_must_be_a_full_hash(world, tmp_path):
    store = Store(tmp_path / "store")
    with pytest.raises(AdapterError, match="neither a name nor a hash"):
        register_path(store, world.rl, "deadbeef", [], None)
    with pytest.raises(AdapterError, match="--parent is required"):
        register_path(store, world.rl, None, [], None)


def test_one_adapter_one_parent(world, tmp_path):
    store = registered_store(world, tmp_path / "store")
    with pytest.raises(LineageError, match="exactly one parent"):
        register_path(store, world.rl, "base", [], None)
    register_path(store, world.rl, "sft", ["rl-again"], None)  # same claim: idempotent
    assert store.resolve("rl-again") == store.resolve("rl")


def test_name_taken_by_another_artifact_is_refused(world, tmp_path):
    store = registered_store(world, tmp_path / "store")
    with pytest.raises(AdapterError, match="already refers to"):
        register_path(store, world.rl_on_raw_base, "base", ["sft"], None)


def test_store_copy_survives_deleting_the_source(world, tmp_path):
    import shutil

    source = tmp_path / "sft_copy"
    shutil.copytree(world.sft, source)
    store = Store(tmp_path / "store")
    register_path(store, world.base, None, ["base"], None)
    node = register_path(store, source, "base", ["sft"], None).record["id"]
    shutil.rmtree(source)
    assert store.lineage(node).servable
    (store.object_dir(node) / "adapter_model.safetensors").unlink()
    problems = store.lineage(node).problems
    assert problems and "missing or changed" in problems[0]


def test_base_folder_changed_after_registration_is_reported(world, tmp_path):
    import shutil

    base = tmp_path / "base"
    shutil.copytree(world.base, base)
    store = Store(tmp_path / "store")
    register_path(store, base, None, ["base"], None)
    first_shard = sorted(base.glob("model-*.safetensors"))[0]
    first_shard.unlink()
    assert "missing or changed" in store.lineage(store.resolve("base")).problems[0]


def test_store_defaults_to_pdbgym_home(monkeypatch, tmp_path):
    monkeypatch.setenv("PDBGYM_HOME", str(tmp_path / "home"))
    assert Store().root == tmp_path / "home" / "adapters"


def test_recipe_fields_are_type_checked(tmp_path):
    from pdbgym.adapters.operations import load_recipe

    recipe_file = tmp_path / "recipe.json"
    recipe_file.write_text('{"seed": "forty-two", "corpus_hash": "ab12"}')
    with pytest.raises(AdapterError, match="recipe field 'seed'"):
        load_recipe(recipe_file, {})
    assert load_recipe(recipe_file, {"seed": 42, "lr": None}) == {"seed": 42, "corpus_hash": "ab12"}
    assert load_recipe(None, {"seed": None}) is None
