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


def _ordered(values: torch.Tensor) -> torch.Tensor:
    """float32 values as int64 keys in the same order (the IEEE bits, negatives' flipped)."""
    bits = values.float().contiguous().view(torch.int32).to(torch.int64)
    return torch.where(bits < 0, -(bits & 0x7FFFFFFF) - 1, bits)


def _threshold_by_search(rows: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """The least log-prob kept (``[R, 1]``) of each row of ``rows`` (``[R, V]``), found without sorting.

    A value v is the least kept one when it is the smallest present value whose strictly larger values
    hold less than ``top_p`` of the mass: the full sort's rule, read as a predicate that only turns from
    false to true as v grows. So a bisection over the values' ordered integer keys finds it in at most 33
    rounds of one compare and one sum over the row each, all on the device, with no host round trip.
    """
    keys = _ordered(rows)
    probs = rows.float().exp()
    low, high = keys.amin(dim=-1), keys.amax(dim=-1)
    for _ in range(33):  # the keys of one row span at most 2**32 values
        middle = torch.div(low + high, 2, rounding_mode="floor")
        above = (probs * (keys > middle[:, None])).sum(dim=-1)
        reached = above < top_p[:, 0]
        high = torch.where(reached, middle, high)
        low = torch.where(reached, low, middle + 1)
    return rows.masked_fill(keys < high[:, None], float("inf")).amin(dim=-1, keepdim=True)


def nucleus_mask(logprobs: torch.Tensor, top_p: float | torch.Tensor, sync_free: bool = False) -> torch.Tensor:
    """Boolean mask of the nucleus, same shape as ``logprobs`` (``[..., V]`` log-probs in nats).

    ``top_p`` is a mass in (0, 1], one float or a tensor of shape ``[...]`` (one per row); 1 (or more)
    keeps every token.

    The nucleus is looked for among each row's ``FIRST_LOOK`` most likely tokens (``torch.topk``, a partial
    sort: a full sort of a 150,000-token vocabulary costs several times more). Where those hold at least
    ``top_p`` of the mass, no token past them can belong (the mass before it is already ``top_p``), so the
    set is the full sort's; the rows where they hold less are sorted whole on a CPU, and on a GPU get
    their threshold by a bisection over the row (``_threshold_by_search``: the same rule, some dozens of
    small kernels instead of a sort of the vocabulary). The two agree but for the rounding of the
    mass's sums at the set's edge.

    ``sync_free``: nothing waits on the device's values (what a CUDA graph may hold): the bisection runs
    on every row, on any device, and each row takes its threshold from the first look or from it as above.
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
        if sync_free:
            threshold = torch.where(short[:, None], _threshold_by_search(rows, limit), threshold)
        elif bool(short.any()):
            if rows.device.type == "cpu":
                whole, _ = _threshold(torch.sort(rows[short], dim=-1, descending=True).values, limit[short])
            else:
                whole = _threshold_by_search(rows[short], limit[short])
            threshold = threshold.masked_scatter(short[:, None], whole)
    return ((rows >= threshold) | (limit >= 1.0)).reshape(shape)


def nucleus_logprobs(logprobs: torch.Tensor, top_p: float | torch.Tensor, sync_free: bool = False) -> torch.Tensor:
    """``logprobs`` ([..., V], nats) renormalized over the nucleus (``top_p`` and ``sync_free`` as in
    ``nucleus_mask``); ``-inf`` outside it."""
    kept = logprobs.masked_fill(~nucleus_mask(logprobs, top_p, sync_free), float("-inf"))
    return kept - torch.logsumexp(kept, dim=-1, keepdim=True)
