"""The HF backend on a CUDA device (bf16 weights, fp32 sampling math). Skipped without CUDA.

Self-contained (a word-level tokenizer and a random tiny Llama built here), so it runs on a GPU
machine that has torch and transformers but not the embedded model's package."""

import asyncio

import pytest
import torch

from pdbgym.agent.backends.base import GenerationRequest, SamplingParams
from pdbgym.agent.backends.hf import HFBackend

from modelfixtures import word_tokenizer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(scope="module")
def word_model_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = word_tokenizer(512)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         eos_token_id=tokenizer.eos_token_id)
    folder = tmp_path_factory.mktemp("word-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_cuda_generation_logprobs_match_a_full_forward(word_model_dir):
    backend = HFBackend.from_path(word_model_dir, device="cuda")
    assert next(backend.model.parameters()).device.type == "cuda"
    prompt = backend.tokenizer("w5 w9 w17 w3 w250", add_special_tokens=False)["input_ids"]
    params = SamplingParams(temperature=0.7, top_p=0.95, max_new_tokens=8, seed=1)
    turn = asyncio.run(backend.generate(GenerationRequest(prompt, [], None, params)))
    assert turn.token_ids
    with torch.inference_mode():
        logits = backend.model(torch.tensor([prompt + turn.token_ids], device="cuda")).logits[0].float().cpu()
    scores = torch.log_softmax(logits[len(prompt) - 1:-1] / 0.7, -1)
    expected = scores[torch.arange(len(turn.token_ids)), torch.tensor(turn.token_ids)].tolist()
    assert turn.logprobs == pytest.approx(expected, abs=2e-2)  # bf16: KV-cached vs full forward differ slightly
