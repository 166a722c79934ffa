import pytest

from bankimport.money import AmountError, format_cents, parse_amount


def test_parse_canonical_amounts():
    assert parse_amount("12") == 1200
    assert parse_amount("12.5") == 1250
    assert parse_amount("-0.07") == -7
    assert parse_amount(" 1234.56 ") == 123456


def test_parse_amount_rejects_decimal_comma():
    # A comma groups thousands at one bank and separates decimals at another: never guess here.
    with pytest.raises(AmountError):
        parse_amount("12,50")


def test_parse_amount_rejects_three_decimals():
    with pytest.raises(AmountError):
        parse_amount("1.234")


def test_format_cents_round_trip():
    for cents in (0, 5, -7, 123456, -100):
        assert parse_amount(format_cents(cents)) == cents
