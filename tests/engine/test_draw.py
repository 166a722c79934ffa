"""The engine's draw: processed log-probs per engine convention, the nucleus, greedy decoding, and
hashed Gumbel noise that depends on a row's own seed and step alone."""

import math

import pytest
import torch

from pdbgym.agent.backends.base import semantics_fields
from pdbgym.engine.draw import draw_rows, gumbel_noise
from pdbgym.nucleus import nucleus_mask


def draw_token(logits, temperature, top_p, seed=0, logprob_mode="tempered", step=0):
    """One row through ``draw_rows``."""
    ids, logprobs = draw_rows(logits[None, :], torch.tensor([temperature]), torch.tensor([top_p]),
                              torch.tensor([seed]), torch.tensor([step]), [logprob_mode])
    return int(ids[0]), float(logprobs[0])


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
    token, reported = draw_token(logits, temperature, top_p, 1, mode)
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
    counts = torch.zeros(4)
    for seed in range(2000):  # seeds, and steps within one seed: both must give independent draws
        counts[draw_token(logits, 1.0, 0.9, seed)[0]] += 1
        counts[draw_token(logits, 1.0, 0.9, 7, step=seed)[0]] += 1
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


def test_bf16_logits_are_drawn_in_fp32():
    logits = torch.randn(1000, dtype=torch.bfloat16)
    token, reported = draw_token(logits, 0.7, 1.0, 3)
    expected = torch.log_softmax(logits.float() / 0.7, -1)[token]
    assert math.isclose(reported, float(expected), abs_tol=1e-5)


def test_a_rows_draw_depends_on_its_own_seed_and_step_alone():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(2))
    seeds, steps = torch.tensor([5, 9, 5, 11, 12, 13]), torch.tensor([0, 0, 1, 3, 4, 5])
    ones = torch.ones(6)
    together, _ = draw_rows(logits, ones, ones, seeds, steps, ["tempered"] * 6)
    order = [4, 2, 0, 5, 1, 3]
    shuffled, _ = draw_rows(logits[order], ones, ones, seeds[order], steps[order], ["tempered"] * 6)
    assert shuffled.tolist() == together[order].tolist()
    alone = [draw_token(logits[i], 1.0, 1.0, int(seeds[i]), step=int(steps[i]))[0] for i in range(6)]
    assert alone == together.tolist()
    noise = gumbel_noise(seeds, steps, 50)
    assert not torch.equal(noise[0], noise[2]) and not torch.equal(noise[0], noise[1])  # step and seed matter
    assert torch.equal(noise, gumbel_noise(seeds, steps, 50))


def test_rows_with_different_settings_share_one_call():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]] * 3)
    ids, logprobs = draw_rows(logits, torch.tensor([0.0, 0.5, 1.0]), torch.tensor([1.0, 0.5, 1.0]),
                              torch.tensor([1, 2, 3]), torch.zeros(3, dtype=torch.long), ["raw", "processed", "raw"])
    assert int(ids[0]) == 0  # greedy
    assert float(logprobs[0]) == pytest.approx(float(torch.log_softmax(logits[0], -1)[0]))
    assert int(ids[1]) == 0 and float(logprobs[1]) == pytest.approx(0.0, abs=1e-6)  # T=0.5, top-p 0.5: one token


def test_a_drawn_batch_of_mixed_modes_reports_each_rows_own_mode_with_or_without_host_round_trips():
    """``draw_all`` with a tensor of modes and no host round trip (what the engine's recorded decode step
    runs) draws the ids and reports the log-probs each row gets from ``draw_rows`` in a batch of its mode."""
    from pdbgym.engine.draw import LOGPROB_MODES, draw_all

    generator = torch.Generator().manual_seed(4)
    logits = torch.randn(6, 40, generator=generator) * 2
    temperature = torch.tensor([0.7, 1.0, 0.0, 0.9, 1.3, 0.7])
    top_p = torch.tensor([0.8, 1.0, 1.0, 0.6, 0.95, 1.0])
    seeds, steps = torch.arange(6) * 17, torch.arange(6)
    modes = ["processed", "raw", "tempered", "tempered", "processed", "raw"]
    index = torch.tensor([LOGPROB_MODES.index(m) for m in modes])
    ids, logprobs = draw_all(logits, temperature, top_p, seeds, steps, index, nucleus=True, sync_free=True)
    for mode in set(modes):
        alone_ids, alone = draw_rows(logits, temperature, top_p, seeds, steps, [mode] * 6)
        rows = [i for i, m in enumerate(modes) if m == mode]
        assert ids[rows].tolist() == alone_ids[rows].tolist()
        assert logprobs[rows].tolist() == pytest.approx(alone[rows].tolist(), abs=1e-6)
    assert int(ids[2]) == int(torch.argmax(logits[2]))  # the greedy row


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="logprob_mode"):
        draw_token(torch.zeros(3), 1.0, 1.0, 0, "vllm")
