import pytest

from billing import format_cents, to_cents
from billing.money import split_evenly


def test_text_prices():
    assert to_cents("1,299.90") == 129990
    assert to_cents("$0.05") == 5
    with pytest.raises(ValueError, match="not a price"):
        to_cents("twelve")


def test_whole_and_simple_float_prices():
    assert to_cents(12) == 1200
    assert to_cents(2.5) == 250
    assert to_cents(0.25) == 25


def test_float_prices_from_the_catalogue_feed():
    assert [to_cents(price) for price in (4.35, 19.99, 0.29, 1.15)] == [435, 1999, 29, 115]


def test_formatting_and_splitting():
    assert format_cents(-123456) == "-$1,234.56"
    assert split_evenly(1000, 3) == [334, 333, 333]
