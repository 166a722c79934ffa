"""Train test fixtures: the embedded tokenizer, tiny random Llamas over it, and record builders."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def smol_tokenizer():
    from pdbgym.agent.backends.embedded import load_embedded_tokenizer

    return load_embedded_tokenizer()


def save_tiny_llama(folder, tokenizer, seed: int = 0, hidden: int = 16):
    """A random-weight 1-layer Llama over ``tokenizer``'s vocabulary saved as a HF folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=4096, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smol_tokenizer):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), smol_tokenizer)
