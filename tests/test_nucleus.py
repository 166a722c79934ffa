"""The one top-p nucleus: the sampler's cases, the scorer's cases, and the tie rule both now share."""

import math

import numpy as np
import pytest
import torch

from pdbgym.divergence.transform import token_logprobs
from pdbgym.engine.draw import draw_rows
from pdbgym.nucleus import nucleus_logprobs, nucleus_mask
from pdbgym.rollouts.record import LogprobSemantics


def test_sampler_cases_smallest_set_reaching_top_p_never_empty():
    logprobs = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert nucleus_mask(logprobs, 0.7).tolist() == [True, True, False, False]
    assert nucleus_mask(logprobs, 0.8).tolist() == [True, True, False, False]
    assert nucleus_mask(logprobs, 0.81).tolist() == [True, True, True, False]
    assert nucleus_mask(logprobs, 0.01).tolist() == [True, False, False, False]
    assert nucleus_mask(logprobs[[2, 0, 3, 1]], 0.7).tolist() == [False, True, False, True]
    assert nucleus_mask(logprobs, 1.0).all()


def explicit_nucleus(logp: np.ndarray, top_p: float) -> set[int]:
    """The definition by hand in float64: walk tokens by probability, keep ties of the last one kept."""
    order = np.argsort(-logp, kind="stable")
    before = np.concatenate([[0.0], np.cumsum(np.exp(logp[order]))[:-1]])
    last = logp[order[before < top_p]].min()
    return {int(i) for i in np.flatnonzero(logp >= last)}


@pytest.mark.parametrize("top_p", [0.3, 0.5, 0.9, 0.99])
def test_scorer_cases_match_explicit_nucleus_and_renormalize(top_p):
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 50, generator=generator) * 3
    semantics = LogprobSemantics(engine="t", temperature=0.7, top_p=top_p, top_p_renormalized=True)
    targets = torch.arange(6) * 7
    got = token_logprobs(logits, targets, semantics)
    for row in range(6):
        logp = torch.log_softmax(logits[row].double() / 0.7, -1).numpy()
        kept = explicit_nucleus(logp, top_p)
        assert set(torch.nonzero(nucleus_mask(torch.from_numpy(logp), top_p)).flatten().tolist()) == kept
        target = int(targets[row])
        expected = logp[target] - np.log(np.exp(logp[sorted(kept)]).sum()) if target in kept else -np.inf
        assert float(got[row]) == pytest.approx(expected, abs=1e-4)


def test_ties_with_the_last_kept_token_are_kept_by_sampler_and_scorer():
    # 0.4 alone misses 0.5; the next token is one of three equal 0.2s: all three belong in.
    logprobs = torch.log(torch.tensor([0.2, 0.4, 0.2, 0.2]))
    assert nucleus_mask(logprobs, 0.5).tolist() == [True, True, True, True]
    logprobs = torch.log(torch.tensor([0.2, 0.5, 0.2, 0.1]))
    assert nucleus_mask(logprobs, 0.6).tolist() == [True, True, True, False]
    semantics = LogprobSemantics(engine="t", temperature=1.0, top_p=0.6, top_p_renormalized=True)
    scored = token_logprobs(logprobs.repeat(4, 1), torch.arange(4), semantics)
    assert scored[0] == pytest.approx(math.log(0.2 / 0.9)) and scored[2] == pytest.approx(math.log(0.2 / 0.9))
    assert scored[3] == -math.inf
    # The sampler draws from the same set, and reports the same processed log-prob the scorer computes.
    ids, reported = draw_rows(logprobs.repeat(200, 1), torch.ones(200), torch.full((200,), 0.6),
                              torch.arange(200), torch.zeros(200, dtype=torch.long), ["processed"] * 200)
    drawn = set(zip(ids.tolist(), reported.tolist(), strict=True))
    assert {token for token, _ in drawn} == {0, 1, 2}
    for token, reported in drawn:
        assert reported == pytest.approx(float(scored[token]), abs=1e-6)


def test_renormalized_nucleus_sums_to_one_over_rows():
    logprobs = torch.log_softmax(torch.randn(3, 20, generator=torch.Generator().manual_seed(1)), -1)
    renormalized = nucleus_logprobs(logprobs, 0.8)
    assert torch.allclose(renormalized.exp().sum(-1), torch.ones(3))


def full_sort_mask(logprobs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """The nucleus from one sort of the whole vocabulary (rows ``[R, V]``, ``top_p`` ``[R]``)."""
    ordered = torch.sort(logprobs, dim=-1, descending=True).values
    probs = ordered.exp()
    kept = (torch.cumsum(probs, dim=-1) - probs) < top_p[:, None]
    kept[:, 0] = True
    threshold = ordered.masked_fill(~kept, float("inf")).amin(dim=-1, keepdim=True)
    return (logprobs >= threshold) | (top_p[:, None] >= 1.0)


def test_the_partial_sort_gives_the_full_sorts_nucleus_in_peaked_flat_and_tied_rows(monkeypatch):
    import pdbgym.nucleus as nucleus

    monkeypatch.setattr(nucleus, "FIRST_LOOK", 16)  # a small first look, so both ways are taken
    generator = torch.Generator().manual_seed(5)
    peaked = torch.randn(4, 300, generator=generator) * 6  # the nucleus within the first 16
    flat = torch.randn(4, 300, generator=generator) * 0.1  # it reaches far past them: sorted whole
    tied = torch.zeros(2, 300)
    tied[:, :40] = 2.0  # 40 equal tokens straddle the first look's edge
    logprobs = torch.log_softmax(torch.cat([peaked, flat, tied]), -1)
    top_p = torch.tensor([0.5, 0.9, 0.95, 1.0, 0.5, 0.9, 0.95, 1.0, 0.2, 0.9])
    got = nucleus_mask(logprobs, top_p)
    assert torch.equal(got, full_sort_mask(logprobs, top_p))
    sizes = got.sum(-1).tolist()
    assert max(sizes[:3]) <= 16 and min(sizes[4:7]) > 16 and sizes[8] == 40  # both ways, and every tie kept
    assert torch.equal(nucleus_mask(logprobs.reshape(2, 5, 300), top_p.reshape(2, 5)),
                       got.reshape(2, 5, 300))  # leading dims of any shape
    assert torch.equal(nucleus_mask(logprobs[0], 0.9), full_sort_mask(logprobs[:1], torch.tensor([0.9]))[0])
    # what a CUDA graph holds: no host round trip, the bisection run on every row and each row's choice kept
    assert torch.equal(nucleus_mask(logprobs, top_p, sync_free=True), got)


def test_the_gpus_threshold_search_keeps_the_full_sorts_nucleus_row_for_row():
    """The bisection a GPU uses for rows past the first look: the same set as the full sort in flat,
    peaked and tied rows at many top-p values (run here on CPU tensors: the arithmetic is the same)."""
    from pdbgym.nucleus import _threshold_by_search

    generator = torch.Generator().manual_seed(11)
    rows = [torch.randn(8, 2000, generator=generator) * scale for scale in (0.02, 0.3, 1.0, 4.0, 9.0)]
    tied = torch.zeros(8, 2000)
    tied[:, :300] = 1.5
    logprobs = torch.log_softmax(torch.cat([*rows, tied]), -1)
    top_p = torch.rand(logprobs.shape[0], generator=generator) * 0.98 + 0.01
    threshold = _threshold_by_search(logprobs, top_p[:, None])
    assert torch.equal(logprobs >= threshold, full_sort_mask(logprobs, top_p))
    assert ((logprobs >= threshold).sum(-1) >= 1).all()
