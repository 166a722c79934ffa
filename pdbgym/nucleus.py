"""The top-p nucleus: one definition for the sampler and for scoring log-probs under a top-p transform.

The nucleus of a distribution is the smallest set of most likely tokens whose mass reaches ``top_p``,
plus every token tied with its least likely member (so the set does not depend on how a sort orders
equal values). The most likely token is always in it, so it is never empty.
"""

from __future__ import annotations

import torch

from pdbgym.versions import require

require("torch")  # pdbgym/versions.py: a clear error when the installed torch is too old


FIRST_LOOK = 1024  # the nucleus is looked for among this many most likely tokens before any full sort


def _threshold(descending: torch.Tensor, top_p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The least log-prob kept, from log-probs sorted descending (``[R, K]``, a prefix of the full order),
    and the mass of those K (``[R, 1]`` each)."""
    probs = descending.exp()
    mass = torch.cumsum(probs, dim=-1)
    kept = (mass - probs) < top_p
    kept[:, 0] = True
    return descending.masked_fill(~kept, float("inf")).amin(dim=-1, keepdim=True), mass[:, -1:]


def nucleus_mask(logprobs: torch.Tensor, top_p: float | torch.Tensor) -> torch.Tensor:
    """Boolean mask of the nucleus, same shape as ``logprobs`` (``[..., V]`` log-probs in nats).

    ``top_p`` is a mass in (0, 1], one float or a tensor of shape ``[...]`` (one per row); 1 (or more)
    keeps every token.

    The nucleus is looked for among each row's ``FIRST_LOOK`` most likely tokens (``torch.topk``, a partial
    sort: a full sort of a 150,000-token vocabulary costs several times more). Where those hold at least
    ``top_p`` of the mass, no token past them can belong (the mass before it is already ``top_p``), so the
    set is the full sort's; the rows where they hold less are sorted whole.
    """
    if not isinstance(top_p, torch.Tensor):
        if top_p >= 1.0:
            return torch.ones_like(logprobs, dtype=torch.bool)
        top_p = torch.tensor(top_p, dtype=logprobs.dtype, device=logprobs.device)
    shape = logprobs.shape
    rows = logprobs.reshape(-1, shape[-1])
    limit = top_p.to(logprobs.dtype).expand(shape[:-1]).reshape(-1, 1)
    look = min(FIRST_LOOK, shape[-1])
    threshold, mass = _threshold(torch.topk(rows, look, dim=-1).values, limit)
    if look < shape[-1]:
        short = ((mass < limit) & (limit < 1.0))[:, 0]  # the nucleus may reach past the first look
        if bool(short.any()):
            whole, _ = _threshold(torch.sort(rows[short], dim=-1, descending=True).values, limit[short])
            threshold = threshold.masked_scatter(short[:, None], whole)
    return ((rows >= threshold) | (limit >= 1.0)).reshape(shape)


def nucleus_logprobs(logprobs: torch.Tensor, top_p: float | torch.Tensor) -> torch.Tensor:
    """``logprobs`` ([..., V], nats) renormalized over the nucleus (``top_p`` as in ``nucleus_mask``); ``-inf`` outside it."""
    kept = logprobs.masked_fill(~nucleus_mask(logprobs, top_p), float("-inf"))
    return kept - torch.logsumexp(kept, dim=-1, keepdim=True)
