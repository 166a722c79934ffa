"""Pure sampling math: processed log-probs, the top-p nucleus, and drawing a token.

Everything here takes logits (a 1-D float tensor over the vocabulary, shape ``[V]``) and returns
tensors or ids; no models, no I/O. Log-probs are natural logs (nats, <= 0).

Engines report different log-probs for the same sampled token (docs/cache-format.md, ``logprob_semantics``); ``draw_token``
offers each: raw ``log_softmax(z)[y]``, tempered ``log_softmax(z / T)[y]``, and processed
``log_softmax(z / T)[y] - log Z`` with ``Z`` the top-p nucleus mass.
"""

from __future__ import annotations

import torch

from pdbgym.agent.backends.base import LOGPROB_MODES
from pdbgym.nucleus import nucleus_logprobs, nucleus_mask

__all__ = ["draw_token", "nucleus_mask", "sampling_logprobs", "tempered_logprobs"]


def tempered_logprobs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log_softmax(z / T)`` in fp32, shape ``[V]``. ``temperature == 0`` means greedy: T=1 values."""
    scale = temperature if temperature > 0 else 1.0
    return torch.log_softmax(logits.float() / scale, dim=-1)


def sampling_logprobs(logprobs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The distribution tokens are drawn from: the nucleus (``pdbgym.nucleus``), renormalized; ``-inf`` outside."""
    return nucleus_logprobs(logprobs, top_p)


def draw_token(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    generator: torch.Generator | None = None,
    logprob_mode: str = "tempered",
) -> tuple[int, float]:
    """Draw one token id from ``logits`` ([V]); return it with its reported log-prob (nats).

    ``logprob_mode``: ``raw`` = log_softmax(z)[y] (vLLM's default), ``tempered`` = log_softmax(z/T)[y]
    (SGLang), ``processed`` = log-prob under the renormalized nucleus actually sampled from (vLLM
    ``processed_logprobs``). ``temperature == 0`` is greedy decoding (argmax); all modes then report
    the T=1 log-prob.
    """
    if logprob_mode not in LOGPROB_MODES:
        raise ValueError(f"logprob_mode must be one of {LOGPROB_MODES}, got {logprob_mode!r}")
    if temperature <= 0:
        raw = tempered_logprobs(logits, 1.0)
        token = int(torch.argmax(raw))
        return token, float(raw[token])
    tempered = tempered_logprobs(logits, temperature)
    nucleus = sampling_logprobs(tempered, top_p)
    token = int(torch.multinomial(nucleus.exp(), 1, generator=generator))
    if logprob_mode == "raw":
        return token, float(tempered_logprobs(logits, 1.0)[token])
    return token, float(nucleus[token] if logprob_mode == "processed" else tempered[token])
