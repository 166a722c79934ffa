"""Builds tiny real models and PEFT adapters for the adapter tests (no hub, CPU, seconds)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TARGETS = ["q_proj", "v_proj", "o_proj", "up_proj"]


def tiny_llama(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=96, max_position_embeddings=64, tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval()


def add_adapter(model, seed: int, use_dora: bool, magnitude_drift: float, **lora_kwargs):
    """A PEFT adapter with random A and B (not identity); DoRA magnitudes multiplied by (1 + drift*noise)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, use_dora=use_dora,
                        init_lora_weights=False, **lora_kwargs)
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_magnitude_vector" in name and magnitude_drift:
                param.mul_(1 + magnitude_drift * torch.randn_like(param))
    return peft_model


@dataclass
class World:
    """base -> sft (DoRA) -> rl (DoRA delta) -> top (LoRA); plus a delta really trained on the raw base."""

    base: Path
    sft: Path
    sft_merged: Path
    rl: Path
    top: Path
    rl_on_raw_base: Path


def build_world(root: Path) -> World:
    base_model = tiny_llama(0)
    base_model.save_pretrained(root / "base", max_shard_size="100KB")
    sft = add_adapter(tiny_llama(0), 1, use_dora=True, magnitude_drift=0.3)
    sft.save_pretrained(root / "sft")
    sft_merged = sft.merge_and_unload()
    sft_merged.save_pretrained(root / "sft_merged")
    rl = add_adapter(sft_merged, 2, use_dora=True, magnitude_drift=1e-3)
    rl.save_pretrained(root / "rl")
    rl_merged = rl.merge_and_unload()
    top = add_adapter(rl_merged, 3, use_dora=False, magnitude_drift=0.0, use_rslora=True)
    top.save_pretrained(root / "top")
    wrong = add_adapter(tiny_llama(0), 4, use_dora=True, magnitude_drift=1e-3)
    wrong.save_pretrained(root / "rl_on_raw_base")
    return World(root / "base", root / "sft", root / "sft_merged", root / "rl", root / "top", root / "rl_on_raw_base")


_WORLD: World | None = None


def shared_world(tmp_path_factory) -> World:
    """One world per test process (tests must copy anything they modify)."""
    global _WORLD
    if _WORLD is None:
        _WORLD = build_world(tmp_path_factory.mktemp("adapters_world"))
    return _WORLD


def registered_store(world: World, root: Path):
    """A fresh store with base -> sft -> rl -> top registered under those names."""
    from pdbgym.adapters.operations import register_path
    from pdbgym.adapters.store import Store

    store = Store(root)
    register_path(store, world.base, None, ["base"], None)
    register_path(store, world.sft, "base", ["sft"], {"seed": 42, "rank": 4})
    register_path(store, world.rl, "sft", ["rl"], None)
    register_path(store, world.top, "rl", ["top"], None)
    return store


def state_dict_of(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of a saved model folder (single file or shards)."""
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(shard))
    return tensors
