"""Log-probs of given tokens under a sampling transform (temperature, top-p), from logit rows.

Pure tensor math, no models. The transform must match the one the cached log-probs were produced
under (``LogprobSemantics``): comparing a student's T=1 log-probs with a teacher's T=0.7 ones measures
the temperature, not the models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdbgym.divergence.semantics import SemanticsError
from pdbgym.rollouts.record import LogprobSemantics

if TYPE_CHECKING:
    import torch


def check_transform(semantics: LogprobSemantics) -> None:
    """Raise ``SemanticsError`` for a transform that has no finite, well-defined log-prob."""
    if not semantics.temperature > 0:
        raise SemanticsError(
            f"temperature {semantics.temperature} has no log-probs to compare (greedy decoding is a "
            "point mass); give the temperature the cached log-probs were computed at, e.g. 1.0"
        )
    if not 0 < semantics.top_p <= 1:
        raise SemanticsError(f"top_p {semantics.top_p} is outside (0, 1]; give a nucleus mass such as 0.9")


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, semantics: LogprobSemantics) -> torch.Tensor:
    """log p(target) for each logit row under ``semantics``, in fp32.

    Shapes: ``logits`` [N, V] (any float dtype; upcast to fp32 before the logsumexp), ``targets`` [N]
    int64, result [N] fp32 nats. With ``top_p_renormalized`` and top_p < 1 the log-prob is
    log_softmax over the nucleus of the temperature-scaled distribution (the smallest set of most
    likely tokens whose mass reaches top_p, ties kept: ``pdbgym.nucleus``), and a
    target OUTSIDE the nucleus gets -inf: the model could not have sampled it. Callers count those.
    Without renormalization top-p does not change the log-prob (SGLang's recent behaviour).
    """
    import torch  # optional: torch (pdbgym[hf])

    from pdbgym.nucleus import nucleus_mask  # heavy: imports torch at load

    scaled = logits.float()
    if semantics.temperature != 1.0:
        # In place only on our own fp32 copy; an fp32 input is the caller's tensor and stays untouched.
        scaled = scaled / semantics.temperature if scaled is logits else scaled.div_(semantics.temperature)
    log_normalizer = torch.logsumexp(scaled, dim=-1, keepdim=True)  # [N, 1]
    if not (semantics.top_p_renormalized and semantics.top_p < 1.0):
        # Only the picked entries are normalized: no second [N, V] fp32 tensor.
        return (scaled.gather(-1, targets.unsqueeze(-1)) - log_normalizer).squeeze(-1)
    log_probs = scaled - log_normalizer
    picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    mask = nucleus_mask(log_probs, semantics.top_p)
    log_nucleus_mass = torch.logsumexp(log_probs.masked_fill(~mask, float("-inf")), dim=-1)
    inside = mask.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return torch.where(inside, picked - log_nucleus_mass, torch.full_like(picked, float("-inf")))
