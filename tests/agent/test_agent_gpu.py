"""The HF backend on a CUDA device (bf16 weights, fp32 sampling math). Skipped without CUDA."""

import asyncio

import pytest
import torch

from pdbgym.agent.backends.base import GenerationRequest, SamplingParams
from pdbgym.agent.backends.hf import HFBackend

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_cuda_generation_logprobs_match_a_full_forward(tiny_model_dir):
    backend = HFBackend.from_path(tiny_model_dir, device="cuda")
    prompt = backend.tokenizer("def sub(a, b):", add_special_tokens=False)["input_ids"]
    params = SamplingParams(temperature=0.7, top_p=0.95, max_new_tokens=8, seed=1)
    turn = asyncio.run(backend.generate(GenerationRequest(prompt, [], None, params)))
    with torch.inference_mode():
        logits = backend.model(torch.tensor([prompt + turn.token_ids], device="cuda")).logits[0].float().cpu()
    scores = torch.log_softmax(logits[len(prompt) - 1:-1] / 0.7, -1)
    expected = scores[torch.arange(len(turn.token_ids)), torch.tensor(turn.token_ids)].tolist()
    assert turn.logprobs == pytest.approx(expected, abs=2e-2)  # bf16: KV-cached vs full forward differ slightly
