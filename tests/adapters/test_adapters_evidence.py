"""DoRA parent evidence: magnitudes start as the parent's row norms, so a wrong --parent is caught."""

from __future__ import annotations

import pytest
from adapters_testkit import registered_store, shared_world

from pdbgym.adapters.evidence import judge
from pdbgym.adapters.operations import register_path


@pytest.fixture
def world(tmp_path_factory):
    return shared_world(tmp_path_factory)


def test_delta_trained_on_raw_base_but_claimed_over_sft_is_flagged(world, tmp_path):
    store = registered_store(world, tmp_path / "store")
    result = register_path(store, world.rl_on_raw_base, "sft", ["suspicious"], None)
    assert result.evidence is not None and result.evidence.verdict == "contradicted"
    base_distance, sft_distance = result.evidence.distances
    assert base_distance < 1e-2 < sft_distance
    assert "base" in result.evidence.message and "claimed parent sft" in result.evidence.message
    assert store.get(store.resolve("suspicious"))["evidence"]["verdict"] == "contradicted"


def test_delta_registered_on_its_true_parent_is_consistent(world, tmp_path):
    store = registered_store(world, tmp_path / "store")
    evidence = store.get(store.resolve("rl"))["evidence"]
    assert evidence["verdict"] == "consistent"
    assert evidence["distances"][-1] < 1e-2 < evidence["distances"][0]
    assert "evidence" not in store.get(store.resolve("top"))  # plain LoRA carries no parent evidence


def test_judge_rules():
    assert judge(["base", "sft"], [0.001, 0.3])[0] == "contradicted"
    assert judge(["base", "sft"], [0.3, 0.001])[0] == "consistent"
    assert judge(["base", "sft"], [0.5, 0.6])[0] == "inconclusive"
    assert judge(["base"], [0.01])[0] == "consistent"


def test_evidence_survives_real_training_from_default_init(world, tmp_path):
    """PEFT's default DoRA init (B = 0, m = ||W||), then real optimizer steps: the parent is still recognised."""
    import torch
    from adapters_testkit import TARGETS, tiny_llama
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(7)
    model = get_peft_model(tiny_llama(0), LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, use_dora=True))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    tokens = torch.randint(0, 96, (4, 24))
    model.train()
    for _ in range(15):
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(tmp_path / "trained_on_base")
    store = registered_store(world, tmp_path / "store")
    claimed_sft = register_path(store, tmp_path / "trained_on_base", "sft", [], None).evidence
    assert claimed_sft is not None and claimed_sft.verdict == "contradicted"
    store_true = registered_store(world, tmp_path / "store2")
    claimed_base = register_path(store_true, tmp_path / "trained_on_base", "base", [], None).evidence
    assert claimed_base is not None and claimed_base.verdict == "consistent"
