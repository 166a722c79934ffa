"""The scorer on CUDA: fp32 agrees with CPU, bf16 agrees with the naive path and uses far less memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from div_models import make_record, tiny_model

from pdbgym.divergence.scoring import ScoringConfig, score_records
from pdbgym.rollouts.record import LogprobSemantics

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
SEMANTICS = LogprobSemantics(engine="test", temperature=0.7)
QUIET = ScoringConfig(show_progress=False)


def test_fp32_on_cuda_matches_cpu():
    rng = np.random.default_rng(0)
    records = [make_record(rng, f"t{i}", 30, 200 + 50 * i) for i in range(4)]
    cpu_model = tiny_model("qwen3")
    on_cpu = score_records(cpu_model, records, SEMANTICS, QUIET)
    on_gpu = score_records(cpu_model.to("cuda"), records, SEMANTICS, QUIET)
    for a, b in zip(on_cpu, on_gpu, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)


def test_bf16_chunked_matches_naive_with_a_fraction_of_the_memory():
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(0)
    config = Qwen3Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=32, intermediate_size=256, vocab_size=32000, max_position_embeddings=8192)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16).cuda().eval()
    rng = np.random.default_rng(1)
    record = make_record(rng, "long", 1, 4095, mask_share=1.0)
    record.tokens = rng.integers(0, 32000, size=4096).tolist()
    ids = torch.tensor([record.tokens], device="cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, :-1].float() / SEMANTICS.temperature
        naive = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1).double().cpu().numpy()
    del logits
    naive_peak = torch.cuda.max_memory_allocated() - before
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    chunked = score_records(model, [record], SEMANTICS, ScoringConfig(show_progress=False, logit_chunk_bytes=2**24))[0]
    chunked_peak = torch.cuda.max_memory_allocated() - before
    mask = np.array(record.loss_mask) == 1
    np.testing.assert_allclose(chunked, naive[mask], atol=0.1)
    assert np.abs(chunked - naive[mask]).mean() < 0.02
    assert chunked_peak < naive_peak / 4, (chunked_peak, naive_peak)
