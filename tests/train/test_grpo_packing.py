"""The update's forwards over length groups with their padding cut: the same log-probs, entropies and
gradients as one padded batch, on a tiny rotary model with left-padded prompts and right-padded
completions of many lengths."""

from __future__ import annotations

import pytest
import torch

from pdbgym.train.grpo.packing import grouped_scores, length_groups


def tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    return LlamaForCausalLM(config).float()


def score_with(model):
    """What TRL's scorer computes on one batch: each completion id's log-prob and each position's entropy."""
    def score(ids, mask, keep, compute_entropy=False):
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -keep - 1:-1].float()
        logps = torch.log_softmax(logits, -1)
        picked = logps.gather(-1, ids[:, -keep:, None])[..., 0]
        entropy = -(logps.exp() * logps).sum(-1) if compute_entropy else None
        return picked, entropy, None
    return score


def batch(prompts: list[int], completions: list[int]):
    """TRL's layout: prompts left-padded to the longest, completions right-padded to the longest."""
    generator = torch.Generator().manual_seed(3)
    width_p, width_c = max(prompts), max(completions)
    ids = torch.zeros(len(prompts), width_p + width_c, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        ids[row, width_p - p:width_p + c] = torch.randint(1, 97, (p + c,), generator=generator)
        mask[row, width_p - p:width_p + c] = 1
    return ids, mask, width_c


PROMPTS = [5, 30, 12, 30, 7, 18]
COMPLETIONS = [40, 3, 25, 60, 9, 1]


@pytest.mark.parametrize("budget", [1, 80, 200, 10_000])
def test_groups_give_the_padded_batchs_logprobs_entropies_and_gradients(budget):
    model = tiny_model()
    ids, mask, keep = batch(PROMPTS, COMPLETIONS)
    completion_mask = mask[:, -keep:].float()
    whole, whole_entropy, _ = score_with(model)(ids, mask, keep, compute_entropy=True)
    (whole * completion_mask).sum().backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    grouped, entropy = grouped_scores(score_with(model), ids, mask, keep, budget, compute_entropy=True)
    (grouped * completion_mask).sum().backward()
    assert grouped.shape == whole.shape and entropy.shape == whole_entropy.shape
    on = completion_mask.bool()
    assert torch.allclose(grouped[on], whole[on], atol=1e-5)
    assert torch.allclose(entropy[on], whole_entropy[on], atol=1e-5)
    for name, p in model.named_parameters():
        assert torch.allclose(p.grad, expected[name], atol=1e-5), name


def test_groups_stay_within_the_budget_longest_first_and_cover_every_row():
    first = [10, 0, 5, 20, 0, 12]
    last = [50, 90, 30, 25, 10, 60]
    groups = length_groups(first, last, budget=120)
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert groups[0][0] == 1  # the widest row leads
    for group in groups:
        width = max(last[i] for i in group) - min(first[i] for i in group) + 1
        assert len(group) == 1 or width * len(group) <= 120
    assert length_groups(first, last, budget=10**9) == [[1, 5, 0, 2, 4, 3]]  # one group when it all fits
