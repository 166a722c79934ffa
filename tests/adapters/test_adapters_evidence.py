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
