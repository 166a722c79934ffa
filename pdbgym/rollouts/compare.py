"""Exact record comparison: used to verify conversions and to make appends idempotent."""

from __future__ import annotations

import numpy as np

from pdbgym.rollouts.record import RECORD_KEYS, RecordMetadata, RolloutRecord


def _floats_bit_equal(first: list[float], second: list[float]) -> bool:
    """True when both lists hold the same float64 bit patterns (so NaN == NaN and 0.0 != -0.0)."""
    if len(first) != len(second):
        return False
    return bool(
        np.array_equal(
            np.asarray(first, dtype=np.float64).view(np.uint64),
            np.asarray(second, dtype=np.float64).view(np.uint64),
        )
    )


def _without_sample_idx(metadata: RecordMetadata) -> dict[str, object]:
    return {key: value for key, value in metadata.items() if key != "_sample_idx"}


def record_differences(
    first: RolloutRecord, second: RolloutRecord, *, ignore_sample_idx: bool = False
) -> list[str]:
    """Names of the fields in which two records differ (empty when identical).

    Log-probs and the reward are compared bit for bit; ``metadata`` and ``reward_extra`` with ``==``
    (so a tuple that became a list is a difference). ``ignore_sample_idx`` leaves
    ``metadata["_sample_idx"]`` out of the comparison.
    """
    differing: list[str] = []
    for key in RECORD_KEYS:
        left, right = getattr(first, key), getattr(second, key)
        if key == "metadata" and ignore_sample_idx:
            left, right = _without_sample_idx(left), _without_sample_idx(right)
        if key == "rollout_log_probs":
            same = _floats_bit_equal(left, right)
        elif key == "reward_score":
            same = _floats_bit_equal([left], [right])
        else:
            same = type(left) is type(right) and left == right
        if not same:
            differing.append(key)
    return differing
