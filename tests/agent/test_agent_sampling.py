"""Sampling math: processed log-probs per engine convention, the nucleus, greedy decoding."""

import math

import pytest
import torch

from pdbgym.agent.backends.base import semantics_fields
from pdbgym.agent.sampling import draw_token, nucleus_mask, tempered_logprobs


def test_nucleus_keeps_smallest_set_reaching_top_p():
    logprobs = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert nucleus_mask(logprobs, 0.7).tolist() == [True, True, False, False]
    assert nucleus_mask(logprobs, 0.8).tolist() == [True, True, False, False]
    assert nucleus_mask(logprobs, 0.81).tolist() == [True, True, True, False]
    assert nucleus_mask(logprobs, 0.01).tolist() == [True, False, False, False]  # never empty
    shuffled = logprobs[[2, 0, 3, 1]]
    assert nucleus_mask(shuffled, 0.7).tolist() == [False, True, False, True]


@pytest.mark.parametrize("mode", ["raw", "tempered", "processed"])
def test_reported_logprob_follows_mode(mode):
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0, -3.0])
    temperature, top_p = 0.7, 0.8
    generator = torch.Generator().manual_seed(1)
    token, reported = draw_token(logits, temperature, top_p, generator, mode)
    tempered = torch.log_softmax(logits / temperature, -1)
    kept = nucleus_mask(tempered, top_p)
    assert kept[token], "a sampled token must lie in the nucleus"
    expected = {
        "raw": torch.log_softmax(logits, -1)[token],
        "tempered": tempered[token],
        "processed": tempered[token] - torch.logsumexp(tempered[kept], -1),
    }[mode]
    assert reported == pytest.approx(float(expected), abs=1e-6)


def test_sampling_frequencies_match_renormalized_nucleus():
    logits = torch.tensor([1.0, 0.0, -0.5, -2.0])
    generator = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    for _ in range(4000):
        token, _ = draw_token(logits, 1.0, 0.9, generator)
        counts[token] += 1
    probs = torch.softmax(logits, -1)
    kept = nucleus_mask(torch.log(probs), 0.9)
    target = torch.where(kept, probs, torch.zeros(4)) / probs[kept].sum()
    assert counts[~kept].sum() == 0
    assert torch.allclose(counts / 4000, target, atol=0.03)


def test_greedy_reports_t1_logprob_and_argmax():
    logits = torch.tensor([0.1, 3.0, 2.9])
    token, reported = draw_token(logits, 0.0, 0.5)
    assert token == 1
    assert reported == pytest.approx(float(torch.log_softmax(logits, -1)[1]))
    assert semantics_fields("tempered", 0.0, 0.5) == {"temperature": 1.0, "top_p": 1.0, "top_p_renormalized": False}


def test_tempered_logprobs_upcasts_and_normalizes():
    logits = torch.randn(1000, dtype=torch.bfloat16)
    out = tempered_logprobs(logits, 0.7)
    assert out.dtype == torch.float32
    assert math.isclose(float(torch.logsumexp(out, -1)), 0.0, abs_tol=1e-5)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="logprob_mode"):
        draw_token(torch.zeros(3), 1.0, 1.0, logprob_mode="vllm")
