from fractions import Fraction

import pytest

from recipes.ingredients import IngredientError, parse_ingredient
from recipes.scaling import parse_recipe, scale
from recipes.shopping import UnitMismatch, combine

PANCAKES = """
2 cups flour
3 tbsp sugar
2 pieces egg
"""

CREPES = """
1 1/2 cups flour
1/2 cup milk
1 piece egg
"""

CAKE = """
1 1/4 cups sugar
200 g butter
"""


def test_simple_line():
    assert parse_ingredient("3/4 Cups milk") == parse_ingredient("3/4 cup milk")


def test_unknown_unit():
    with pytest.raises(IngredientError, match="handful"):
        parse_ingredient("1 handful nuts")


def test_scale_exactly():
    scaled = scale(parse_recipe(PANCAKES), 4, 6)
    assert [i.amount for i in scaled] == [3, Fraction(9, 2), 3]


def test_combine_converts_spoons_to_cups():
    totals = combine(parse_recipe("1 cup sugar"), parse_recipe(PANCAKES))
    assert totals["sugar"] == (Fraction(19, 16), "cup")


def test_incompatible_units_refused():
    with pytest.raises(UnitMismatch, match="'g' and 'cup' of flour"):
        combine(parse_recipe("1 cup flour"), parse_recipe("100 g flour"))


def test_mixed_number_amount():
    assert parse_ingredient("1 1/2 cups flour").amount == Fraction(3, 2)


def test_pancakes_and_crepes_shopping_list():
    totals = combine(parse_recipe(PANCAKES), parse_recipe(CREPES))
    assert totals["flour"] == (Fraction(7, 2), "cup")
    assert totals["egg"] == (3, "piece")


def test_crepes_then_cake():
    totals = combine(parse_recipe(CAKE), parse_recipe(PANCAKES))
    assert totals["sugar"] == (Fraction(1, 4) + 1 + Fraction(3, 16), "cup")


def test_mixed_number_unit_is_normalised():
    assert parse_ingredient("2 1/4 Tablespoons honey").unit == "tbsp"
