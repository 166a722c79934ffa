"""Sample-based KL and JSD estimators (pure numpy; no models, no I/O).

Notation, per scored token: ``lT`` = teacher log-prob, ``lS`` = student log-prob (nats), both under the
same sampling transform. For samples x ~ q estimating KL(q || p) with log r = log p(x) - log q(x)
(Schulman, "Approximating KL Divergence"):

    k1 = -log r                 unbiased, high variance, can be negative
    k2 = (log r)^2 / 2          biased, low variance, >= 0
    k3 = (r - 1) - log r        unbiased, >= 0

* Teacher-sampled tokens (the cache) estimate KL(teacher || student): log r = lS - lT.
* Student-sampled tokens estimate KL(student || teacher): log r = lT - lS.
* JSD = 1/2 KL(T || M) + 1/2 KL(S || M), M = (T + S) / 2, each half from its own model's samples;
  log M = logaddexp(lT, lS) - log 2. The exact JSD is <= log 2.

Per sequence, KL is the sum of the token terms (chain rule); JSD does not decompose over tokens, so the
sequence-level JSD is computed from whole-sequence log-probs (``jsd_sequence_terms``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

KlEstimator = Literal["k1", "k2", "k3"]
KL_ESTIMATORS: tuple[KlEstimator, ...] = ("k1", "k2", "k3")
LOG_2 = float(np.log(2.0))


def kl_terms(log_ratio: np.ndarray, estimator: KlEstimator) -> np.ndarray:
    """Per-sample KL(q || p) estimates from ``log_ratio`` = log p(x) - log q(x), x ~ q (nats).

    The direction is set by the caller: the distribution the samples came from is q. Non-finite
    log-ratios stay non-finite (callers count and report them; nothing is clamped here).
    """
    log_r = np.asarray(log_ratio, dtype=np.float64)
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r * log_r
    if estimator == "k3":
        with np.errstate(over="ignore", invalid="ignore"):
            return np.expm1(log_r) - log_r
    raise ValueError(f"unknown KL estimator {estimator!r}; use one of {KL_ESTIMATORS}")


def kl_teacher_student_terms(
    teacher_logprobs: np.ndarray, student_logprobs: np.ndarray, estimator: KlEstimator
) -> np.ndarray:
    """Per-token estimates of KL(teacher || student) from TEACHER-sampled tokens (the cache)."""
    return kl_terms(np.asarray(student_logprobs) - np.asarray(teacher_logprobs), estimator)


def kl_student_teacher_terms(
    student_logprobs: np.ndarray, teacher_logprobs: np.ndarray, estimator: KlEstimator
) -> np.ndarray:
    """Per-token estimates of KL(student || teacher) from STUDENT-sampled tokens."""
    return kl_terms(np.asarray(teacher_logprobs) - np.asarray(student_logprobs), estimator)


def log_mixture(teacher_logprobs: np.ndarray, student_logprobs: np.ndarray) -> np.ndarray:
    """log M(x) with M = (T + S) / 2, stable for very negative log-probs."""
    return np.logaddexp(teacher_logprobs, student_logprobs) - LOG_2


def jsd_half_terms(
    sampler_logprobs: np.ndarray, other_logprobs: np.ndarray, estimator: KlEstimator = "k3"
) -> np.ndarray:
    """Per-sample estimates of KL(Q || M) from x ~ Q, with M the even mixture of Q and the other model.

    For teacher samples pass (lT, lS); for student samples pass (lS, lT). Each term estimates one half
    of the JSD before the 1/2 weight. log r = log M - log Q lies in [-log 2, inf).
    """
    sampler = np.asarray(sampler_logprobs, dtype=np.float64)
    log_r = log_mixture(sampler, np.asarray(other_logprobs, dtype=np.float64)) - sampler
    return kl_terms(log_r, estimator)


def jsd_from_halves(teacher_half_mean: float, student_half_mean: float) -> float:
    """JSD = 1/2 KL(T || M) + 1/2 KL(S || M) from the two halves' means (each from its own samples)."""
    return 0.5 * teacher_half_mean + 0.5 * student_half_mean


def jsd_sequence_terms(
    sampler_sequence_logprobs: np.ndarray, other_sequence_logprobs: np.ndarray
) -> np.ndarray:
    """Per-sequence KL(Q || M) terms (k1) from whole-sequence log-probs (sums over scored tokens).

    Shape [n_sequences] in, [n_sequences] out, each term <= log 2. Sequence-level JSD is
    1/2 mean(teacher terms) + 1/2 mean(student terms).
    """
    return jsd_half_terms(sampler_sequence_logprobs, other_sequence_logprobs, "k1")


def extreme_share(log_ratio: np.ndarray, threshold: float = 20.0) -> float:
    """Share of positions with |log-ratio| > ``threshold`` nats (non-finite ones included)."""
    log_r = np.asarray(log_ratio, dtype=np.float64)
    if log_r.size == 0:
        return 0.0
    with np.errstate(invalid="ignore"):
        extreme = ~(np.abs(log_r) <= threshold)
    return float(extreme.mean())


def nonfinite_share(values: np.ndarray) -> float:
    """Share of entries that are -inf/+inf/NaN (e.g. a cached token outside the student's nucleus)."""
    arr = np.asarray(values, dtype=np.float64)
    return float((~np.isfinite(arr)).mean()) if arr.size else 0.0
