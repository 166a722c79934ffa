"""Split an amount of integer cents by weights so that the shares add up exactly.

Largest-remainder method: every share starts at the floor of its exact value, and the cents
left over go one each to the shares with the largest remainders (ties by name).
"""

from __future__ import annotations


class AllocationError(ValueError):
    """Weights that cannot split an amount (empty, negative or all zero)."""


def split_cents(total_cents: int, weights: dict[str, int]) -> dict[str, int]:
    """name -> share in cents; shares sum to ``total_cents`` and differ from exact by < 1 cent."""
    if not weights or any(w < 0 for w in weights.values()) or sum(weights.values()) == 0:
        raise AllocationError(f"weights must be non-negative and not all zero, got {weights}")
    weight_sum = sum(weights.values())
    shares = {name: round(total_cents * weight / weight_sum) for name, weight in weights.items()}
    leftover = total_cents - sum(shares.values())
    by_remainder = sorted(weights, key=lambda name: (-(total_cents * weights[name] % weight_sum), name))
    for index in range(leftover):
        shares[by_remainder[index]] += 1
    return shares
