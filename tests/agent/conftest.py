"""Agent test fixtures: the embedded tokenizer, a tiny random Llama over it, and a loopback server."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def smol_tokenizer():
    from pdbgym.agent.backends.embedded import load_embedded_tokenizer

    return load_embedded_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smol_tokenizer):
    """A random-weight 1-layer Llama with SmolLM2's vocabulary, saved as a normal HF folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(smol_tokenizer), hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=16384, tie_word_embeddings=True,
                         eos_token_id=smol_tokenizer.eos_token_id, bos_token_id=smol_tokenizer.bos_token_id)
    model = LlamaForCausalLM(config)
    folder = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(folder)
    smol_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_backend(tiny_model_dir):
    from pdbgym.agent.backends.hf import HFBackend

    return HFBackend.from_path(tiny_model_dir)


@pytest.fixture(scope="session")
def tiny_server(tiny_backend):
    from pdbgym.agent.testing_server import ModelServer

    with ModelServer(tiny_backend.model, tiny_backend.tokenizer, name="tiny-llama") as server:
        yield server
