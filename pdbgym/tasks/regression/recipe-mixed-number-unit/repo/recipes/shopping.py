"""One shopping list for several recipes: the same ingredient is added up across recipes."""

from __future__ import annotations

from fractions import Fraction

from recipes.ingredients import Ingredient

# How many of the second unit make one of the first.
CONVERSIONS = {("cup", "tbsp"): Fraction(16), ("tbsp", "tsp"): Fraction(3), ("cup", "tsp"): Fraction(48)}


class UnitMismatch(ValueError):
    """Two amounts of one ingredient in units that do not convert into each other."""


def in_unit(amount: Fraction, unit: str, target: str, name: str) -> Fraction:
    """``amount`` of ``unit`` expressed in ``target``."""
    if unit == target:
        return amount
    if (target, unit) in CONVERSIONS:
        return amount / CONVERSIONS[(target, unit)]
    if (unit, target) in CONVERSIONS:
        return amount * CONVERSIONS[(unit, target)]
    raise UnitMismatch(f"cannot add {unit!r} and {target!r} of {name}")


def combine(*recipes: list[Ingredient]) -> dict[str, tuple[Fraction, str]]:
    """ingredient name -> (total amount, unit of its first appearance)."""
    totals: dict[str, tuple[Fraction, str]] = {}
    for ingredients in recipes:
        for item in ingredients:
            if item.name not in totals:
                totals[item.name] = (item.amount, item.unit)
                continue
            amount, unit = totals[item.name]
            totals[item.name] = (amount + in_unit(item.amount, item.unit, unit, item.name), unit)
    return totals
