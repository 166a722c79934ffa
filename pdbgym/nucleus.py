"""The top-p nucleus: one definition for the sampler and for scoring log-probs under a top-p transform.

The nucleus of a distribution is the smallest set of most likely tokens whose mass reaches ``top_p``,
plus every token tied with its least likely member (so the set does not depend on how a sort orders
equal values). The most likely token is always in it, so it is never empty.
"""

from __future__ import annotations

import torch

from pdbgym.versions import require

require("torch")  # pdbgym/versions.py: a clear error when the installed torch is too old


def nucleus_mask(logprobs: torch.Tensor, top_p: float | torch.Tensor) -> torch.Tensor:
    """Boolean mask of the nucleus, same shape as ``logprobs`` (``[..., V]`` log-probs in nats).

    ``top_p`` is a mass in (0, 1], one float or a tensor of shape ``[...]`` (one per row); 1 (or more)
    keeps every token.
    """
    if not isinstance(top_p, torch.Tensor):
        if top_p >= 1.0:
            return torch.ones_like(logprobs, dtype=torch.bool)
        top_p = torch.tensor(top_p, dtype=logprobs.dtype, device=logprobs.device)
    top_p = top_p.to(logprobs.dtype).unsqueeze(-1)
    sorted_lp = torch.sort(logprobs, dim=-1, descending=True).values
    sorted_p = sorted_lp.exp()
    kept = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
    kept[..., 0] = True
    threshold = sorted_lp.masked_fill(~kept, float("inf")).amin(dim=-1, keepdim=True)
    return (logprobs >= threshold) | (top_p >= 1.0)


def nucleus_logprobs(logprobs: torch.Tensor, top_p: float | torch.Tensor) -> torch.Tensor:
    """``logprobs`` ([..., V], nats) renormalized over the nucleus (``top_p`` as in ``nucleus_mask``); ``-inf`` outside it."""
    kept = logprobs.masked_fill(~nucleus_mask(logprobs, top_p), float("-inf"))
    return kept - torch.logsumexp(kept, dim=-1, keepdim=True)
