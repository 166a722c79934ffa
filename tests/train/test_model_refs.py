"""Adapter-store references where a model is: `run --policy REF`, `eval --arm NAME=REF`,
`divergence --student REF` resolve a trained adapter to the merged weights of its whole lineage."""

from __future__ import annotations

import pytest
from homefixtures import fresh_home
from recordfixtures import episode_record, write_records

from pdbgym.train.corpus.build import CorpusConfig, build_corpus
from pdbgym.train.sft.config import SFTTrainConfig


@pytest.fixture
def trained(tmp_path, monkeypatch, smol_tokenizer, tiny_model_dir):
    """A one-step LoRA adapter registered as ``ref-sft`` in a fresh store; the store's resolver registered."""
    from pdbgym import modelload
    from pdbgym.adapters.stacked import register_store_refs
    from pdbgym.train.sft.trainer import train_sft

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    monkeypatch.setattr(modelload, "_LINEAGES", [])
    records = [episode_record(smol_tokenizer, "t1", [("b calc.py:3", "Breakpoint"), ("submit", "graded")])]
    build_corpus(CorpusConfig(caches=[write_records(tmp_path / "cache", records)], out=tmp_path / "corpus"))
    config = SFTTrainConfig(base=str(tiny_model_dir), data=tmp_path / "corpus", out=tmp_path / "sft", rank=2,
                            lr=5e-2, use_dora=False, max_steps=1, effective_batch=1, val_fraction=0.0,
                            store=tmp_path / "store", ledger=tmp_path / "ledger.jsonl", name="ref-sft", device="cpu")
    result = train_sft(config)
    register_store_refs(tmp_path / "store")
    return config, result


def test_policy_arm_and_student_accept_a_store_reference(trained):
    import torch

    from pdbgym.adapters.stacked import load_stacked_model
    from pdbgym.adapters.store import Store
    from pdbgym.agent.policies import parse_policy
    from pdbgym.divergence.loading import load_tokenizer_if_any
    from pdbgym.evaluate.campaign import Arm
    from pdbgym.modelload import load_causal_lm

    config, result = trained
    spec = parse_policy("ref-sft")
    assert spec.kind == "path" and spec.target.endswith(result.node_id)
    assert parse_policy(result.node_id[:10]).target == spec.target  # a hash prefix works too, same folder
    assert Arm.parse("sft=ref-sft").model == "ref-sft"  # the arm keeps the name the ledger knows
    merged = load_causal_lm("ref-sft", device="cpu")
    assert load_tokenizer_if_any("ref-sft") is not None
    in_memory = load_stacked_model("ref-sft", Store(config.store)).model
    expected = dict(in_memory.named_parameters())
    for name, value in merged.named_parameters():
        assert torch.allclose(value, expected[name], atol=1e-6), name
    base = load_causal_lm(config.base, device="cpu")
    assert not torch.equal(base.model.layers[0].self_attn.q_proj.weight, merged.model.layers[0].self_attn.q_proj.weight)


def test_unknown_names_and_broken_lineage_are_refused(trained):
    from pdbgym.adapters.errors import LineageError
    from pdbgym.adapters.store import Store
    from pdbgym.agent.backends.base import BackendError
    from pdbgym.agent.policies import parse_policy
    from pdbgym.errors import PdbgymError
    from pdbgym.evaluate.campaign import Arm

    config, result = trained
    with pytest.raises(BackendError, match="is not"):
        parse_policy("no-such-adapter")
    with pytest.raises(PdbgymError, match="neither scripted"):
        Arm.parse("x=no-such-adapter")
    stored = Store(config.store).object_dir(result.node_id) / "adapter_model.safetensors"
    stored.write_bytes(stored.read_bytes()[:-4])
    with pytest.raises(LineageError, match="missing or changed"):
        parse_policy("ref-sft")


def test_the_model_loader_takes_a_store_reference_with_its_lineage(trained):
    """With the store as lineage, a name loads its stack in memory and the parent id is the artifact's; a
    base folder's parent id is its weights' id (what SFT records); without a lineage the registered
    resolver's merged folder loads, and a missing path names the store it searched."""
    import torch

    from pdbgym.adapters.fingerprint import weights_hash
    from pdbgym.adapters.store import Store
    from pdbgym.modelload import ModelLoadError, load_model
    from pdbgym.train.sft.base import StoreLineage, resolve_base

    config, result = trained
    lineage = StoreLineage(Store(config.store))
    stacked = load_model("ref-sft", "cpu", lineage=lineage)
    assert stacked.parent_id == result.node_id and stacked.path is None and stacked.label.startswith("ref-sft")
    merged = load_model("ref-sft", "cpu")  # no lineage: the resolver registered by the fixture
    assert merged.parent_id is None and merged.path is not None and merged.path.name == result.node_id
    expected = dict(stacked.model.named_parameters())
    for name, value in merged.model.named_parameters():
        assert torch.allclose(value, expected[name], atol=1e-6), name
    base = load_model(config.base, "cpu", lineage=lineage, parent=True)
    assert base.parent_id == weights_hash(config.base) == result.parent_id
    assert load_model(config.base, "cpu", lineage=lineage).parent_id is None  # hashing only when asked
    assert resolve_base("ref-sft", Store(config.store), "cpu").parent_id == result.node_id
    with pytest.raises(ModelLoadError, match=f"does not exist; .*the adapter store at {config.store}"):
        load_model("no-such-adapter", "cpu", lineage=lineage)
