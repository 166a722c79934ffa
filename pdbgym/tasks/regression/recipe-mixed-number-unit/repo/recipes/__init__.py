"""Recipes: parse ingredient lines, scale servings, combine shopping lists."""
