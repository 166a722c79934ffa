"""Ingredient lines: ``2 cups flour``, ``1 1/2 tbsp sugar``, ``3/4 cup milk``.

Amounts are exact Fractions; units are normalised to one spelling (see UNIT_SPELLINGS).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

UNIT_SPELLINGS = {
    "cup": "cup", "cups": "cup", "c": "cup",
    "tbsp": "tbsp", "tablespoon": "tbsp", "tablespoons": "tbsp",
    "tsp": "tsp", "teaspoon": "tsp", "teaspoons": "tsp",
    "g": "g", "gram": "g", "grams": "g",
    "piece": "piece", "pieces": "piece",
}


class IngredientError(ValueError):
    """An ingredient line that cannot be read."""


@dataclass(frozen=True)
class Ingredient:
    amount: Fraction
    unit: str
    name: str


def normalise_unit(word: str) -> str:
    unit = word.lower().rstrip(".")
    if unit not in UNIT_SPELLINGS:
        raise IngredientError(f"unknown unit {word!r}; known: {', '.join(sorted(set(UNIT_SPELLINGS.values())))}")
    return UNIT_SPELLINGS[unit]


def parse_ingredient(line: str) -> Ingredient:
    """One ingredient line: amount (whole, fraction or mixed number), unit, name."""
    words = line.split()
    try:
        if len(words) >= 4 and "/" in words[1]:  # mixed number: "1 1/2 cups flour"
            amount = Fraction(words[0]) + Fraction(words[1])
            return Ingredient(amount, words[2].lower(), " ".join(words[3:]))
        if len(words) < 3:
            raise IngredientError(f"expected 'AMOUNT UNIT NAME', got {line!r}")
        return Ingredient(Fraction(words[0]), normalise_unit(words[1]), " ".join(words[2:]))
    except (ValueError, ZeroDivisionError) as exc:
        if isinstance(exc, IngredientError):
            raise
        raise IngredientError(f"bad amount in {line!r}") from exc
