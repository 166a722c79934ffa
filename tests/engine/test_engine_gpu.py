"""The engine's static path on a CUDA device: the captured decode graph samples what the dynamic path
samples, with log-probs equal to a plain fp32 forward pass, and a request arriving mid-decode joins the
running batch. Skipped without CUDA (CI has none; run on the GPU machine)."""

from __future__ import annotations

import copy

import pytest
import torch
from test_engine import REQUESTS, STOP, SubmitAtStep, forward_logprobs

from pdbgym.engine import EngineRequest, EngineSettings, LocalEngine

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(scope="module")
def cuda_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).to("cuda").eval()


def test_the_captured_graph_samples_what_the_dynamic_path_samples(cuda_model):
    static = LocalEngine(cuda_model, {STOP}, 0, EngineSettings(static=True, min_length=512))
    dynamic = LocalEngine(cuda_model, {STOP}, 0, EngineSettings(static=False))
    assert static.mode == "static"
    drawn = static.generate(REQUESTS)
    assert static.mode == "static" and static.stats.compiles  # the graph was captured, not given up
    assert [r.ids for r in drawn] == [r.ids for r in dynamic.generate(REQUESTS)]
    on_cpu = copy.deepcopy(cuda_model).cpu()
    for request, result in zip(REQUESTS, drawn, strict=True):
        expected = forward_logprobs(on_cpu, request, result.ids)
        assert result.logprobs == pytest.approx(expected.tolist(), abs=1e-4)


def test_a_request_joins_a_running_graph_session(cuda_model):
    engine = LocalEngine(cuda_model, set(), 0, EngineSettings(static=True, min_length=512))
    late = EngineRequest([5, 6, 7], 6, temperature=0.9, seed=11)
    hook = SubmitAtStep(engine, 4, late)
    engine.submit(EngineRequest([1, 2, 3, 4, 5, 6, 7, 8], 24, temperature=0.9, seed=10, mask=hook)).result()
    joined = hook.future.result()
    assert engine.stats.batches == 1 and len(joined.ids) == 6
    assert joined.ids == engine.generate([late])[0].ids
