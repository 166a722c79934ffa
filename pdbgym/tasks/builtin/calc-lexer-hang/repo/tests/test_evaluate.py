import pytest

from calc import EvalError, evaluate


def test_precedence_and_parentheses():
    assert evaluate("2 + 3 * 4") == 14
    assert evaluate("(2 + 3) * 4") == 20
    assert evaluate("2 ** 3 ** 2") == 512


def test_unary_minus_binds_tighter_than_multiplication():
    assert evaluate("-2 * -3") == 6
    assert evaluate("10 - -4") == 14


def test_variables_and_functions():
    assert evaluate("max(width, 3) * sqrt(9)", {"width": 5}) == 15
    assert evaluate("round(ratio * 100)", {"ratio": 0.256}) == 26


def test_unknown_variable_names_the_column():
    with pytest.raises(EvalError, match="unknown variable 'height' at column 6"):
        evaluate("2 * (height + 1)")


def test_division_by_zero_is_an_eval_error():
    with pytest.raises(EvalError, match="division by zero"):
        evaluate("7 % (3 - 3)")


def test_trailing_garbage_is_rejected():
    with pytest.raises(EvalError, match="unexpected"):
        evaluate("1 + 2 3")
