"""Scale a recipe from the servings it was written for to the servings wanted."""

from __future__ import annotations

from fractions import Fraction

from recipes.ingredients import Ingredient, parse_ingredient


def parse_recipe(text: str) -> list[Ingredient]:
    """Ingredients of a recipe text, one per non-blank line."""
    return [parse_ingredient(line) for line in text.splitlines() if line.strip()]


def scale(ingredients: list[Ingredient], written_for: int, wanted: int) -> list[Ingredient]:
    """Every amount multiplied by wanted / written_for (exactly)."""
    if written_for <= 0 or wanted <= 0:
        raise ValueError("servings must be positive")
    factor = Fraction(wanted, written_for)
    return [Ingredient(i.amount * factor, i.unit, i.name) for i in ingredients]
