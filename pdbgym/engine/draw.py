"""One decode step's draw for a whole batch: per-row temperature, top-p, seed and log-prob mode.

Rows are drawn with the Gumbel-max rule, ``argmax(log p + g)``, where ``log p`` is the row's nucleus
distribution (``pdbgym.nucleus``: softmax(z / T) renormalized over the top-p set) and ``g`` is Gumbel
noise made by hashing (row seed, step, token id). ``argmax(log p + g)`` is an exact draw from ``p``, and
the noise of a row depends on its own seed and step alone: a row samples the same ids whichever other
rows share its batch, in whatever order (up to the logits' numerics, which do depend on the batch shape).
The hash is integer arithmetic on tensors, so it runs on the model's device with no generator object
and no host round trip.

``temperature == 0`` rows are greedy (argmax of the raw logits; log-prob at T = 1). Log-prob modes are
``raw`` = log_softmax(z)[y], ``tempered`` = log_softmax(z / T)[y], ``processed`` = the nucleus log-prob.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pdbgym.nucleus import nucleus_logprobs

LOGPROB_MODES = ("raw", "tempered", "processed")
_MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finalizer (xor-shift-multiply, three rounds) on int64 tensors holding values
    below 2**32; every product stays below 2**63, so nothing overflows."""
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & _MASK32
    return x ^ (x >> 15)


def row_keys(seeds: torch.Tensor, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two 32-bit keys per row from its seed (any int64) and its step (the id's place in the turn)."""
    low, high = seeds & _MASK32, (seeds >> 32) & _MASK32
    first = _mix32(low ^ _mix32(high ^ _mix32(steps & _MASK32)))
    second = _mix32(first ^ _GOLDEN)
    return first, second


def gumbel_noise(seeds: torch.Tensor, steps: torch.Tensor, vocab: int) -> torch.Tensor:
    """``[B, vocab]`` float32 standard Gumbel noise, a pure function of (seed, step, token id) per row."""
    first, second = row_keys(seeds, steps)
    index = torch.arange(vocab, device=seeds.device, dtype=torch.int64)
    bits = _mix32(_mix32((index[None, :] * _GOLDEN + first[:, None]) & _MASK32) ^ second[:, None])
    uniform = (bits.to(torch.float64) + 0.5) * 2.0**-32  # in (0, 1), never 0 or 1
    return (-torch.log(-torch.log(uniform))).to(torch.float32)


def draw_rows(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, seeds: torch.Tensor,
              steps: torch.Tensor, modes: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one id per row of ``logits`` ([B, V], any float dtype; forbidden ids already -inf).

    ``temperature``, ``top_p`` (float) and ``seeds``, ``steps`` (int64) are ``[B]`` tensors on the
    logits' device; ``modes[b]`` is row b's log-prob mode. Returns ``(ids [B] int64, logprobs [B] float32)``.
    """
    for mode in set(modes):
        if mode not in LOGPROB_MODES:
            raise ValueError(f"logprob_mode must be one of {LOGPROB_MODES}, got {mode!r}")
    chosen: str | torch.Tensor = modes[0] if len(set(modes)) == 1 else torch.tensor(
        [LOGPROB_MODES.index(mode) for mode in modes], device=logits.device)
    # no row truncates (top-p 1, the default): the nucleus is everything, no sort needed
    return draw_all(logits, temperature, top_p, seeds, steps, chosen, nucleus=not bool((top_p >= 1.0).all()))


def draw_all(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, seeds: torch.Tensor,
             steps: torch.Tensor, modes: str | torch.Tensor, nucleus: bool,
             sync_free: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``draw_rows`` with the host's decisions made by the caller: ``modes`` is one mode for every row or
    a ``[B]`` int64 tensor of indices into ``LOGPROB_MODES``, ``nucleus`` whether any row's top-p is below
    1. With ``sync_free`` nothing waits on the device's values (``nucleus_mask``), so the whole draw can
    be recorded in a CUDA graph with the decode step it follows."""
    logits = logits.float()
    greedy = temperature <= 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature)
    tempered = torch.log_softmax(logits / scale[:, None], dim=-1)
    kept = nucleus_logprobs(tempered, top_p, sync_free) if nucleus else tempered
    sampled = torch.argmax(kept + gumbel_noise(seeds, steps, logits.shape[-1]), dim=-1)
    ids = torch.where(greedy, torch.argmax(logits, dim=-1), sampled)
    pick = ids[:, None]
    raw = logits.gather(-1, pick)[:, 0] - torch.logsumexp(logits, dim=-1)  # log_softmax(z)[y], one reduction
    by_mode = {"raw": raw, "tempered": tempered.gather(-1, pick)[:, 0], "processed": kept.gather(-1, pick)[:, 0]}
    chosen = by_mode[modes] if isinstance(modes, str) else \
        torch.stack([by_mode[mode] for mode in LOGPROB_MODES], dim=-1).gather(-1, modes[:, None])[:, 0]
    return ids, torch.where(greedy, raw, chosen)
