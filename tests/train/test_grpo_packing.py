"""The update's forwards over length groups, each row moved to its group's left edge and no padding mask:
the same log-probs, entropies and gradients as one padded batch, on a tiny rotary model with left-padded
prompts and right-padded completions of many lengths."""

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


def score_with(model, seen=None):
    """What TRL's scorer computes on one batch: each completion id's log-prob and each position's entropy;
    ``seen`` collects the masks it was given."""
    def score(ids, mask, keep, compute_entropy=False):
        if seen is not None:
            seen.append(mask)
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
    masks = []
    grouped, entropy = grouped_scores(score_with(model, masks), ids, mask, keep, budget, compute_entropy=True)
    assert masks and all(bool(m.all()) for m in masks)  # no padding mask: attention may take is_causal kernels
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
    for group in groups:  # each row at the group's left edge: its width is its longest row
        width = max(last[i] - first[i] + 1 for i in group)
        assert len(group) == 1 or width * len(group) <= 120
    assert length_groups(first, last, budget=10**9) == [[1, 5, 0, 2, 4, 3]]  # one group when it all fits


def test_a_group_reaches_attention_without_a_mask_as_a_causal_call(monkeypatch):
    """What the left edge buys: transformers' SDPA attention gets no mask and ``is_causal``, which lets torch
    pick the flash kernel on a GPU (a padding mask rules it out)."""
    import torch.nn.functional as F

    model = tiny_model()
    model.config._attn_implementation = "sdpa"
    calls = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append((kwargs.get("attn_mask"), kwargs.get("is_causal")))
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    ids, mask, keep = batch(PROMPTS, COMPLETIONS)
    grouped_scores(score_with(model), ids, mask, keep, 200)
    assert calls and all(m is None and causal for m, causal in calls)
    calls.clear()
    score_with(model)(ids, mask, keep)  # TRL's padded batch: a mask on every call
    assert calls and all(m is not None for m, _ in calls)
