import json
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from shopapi.encoding import ApiEncodingError, encode
from shopapi.mappers import order_to_api
from shopapi.models import Order, Refund
from shopapi.money import MoneyError, to_api_money

PLACED = datetime(2024, 5, 2, 9, 30, tzinfo=timezone(timedelta(hours=2)))


def order(*refunds):
    return Order("A-1001", "ada@example.org", Decimal("59.90"), PLACED, list(refunds))


def test_money_strings():
    assert to_api_money(Decimal("1234.5")) == "1234.50"
    assert to_api_money(Decimal("-0.07")) == "-0.07"


def test_sub_cent_money_refused():
    with pytest.raises(MoneyError):
        to_api_money(Decimal("0.005"))


def test_encoder_refuses_raw_decimals():
    with pytest.raises(ApiEncodingError, match="Decimal"):
        encode({"amount": Decimal("1E+2")})


def test_encoder_refuses_datetimes():
    with pytest.raises(ApiEncodingError, match="datetime"):
        encode({"at": datetime(2024, 1, 1)})


def test_order_without_refunds():
    body = json.loads(encode(order_to_api(order())))
    assert body["total"] == "59.90" and body["net"] == "59.90"
    assert body["placed_at"] == "2024-05-02T07:30:00Z"


def test_payload_is_key_sorted():
    assert encode({"b": 1, "a": [True, None]}) == '{"a":[true,null],"b":1}'


def test_order_with_partial_refund():
    refund = Refund(Decimal("12.50"), "damaged", datetime(2024, 5, 3, 12, 0, tzinfo=UTC))
    body = json.loads(encode(order_to_api(order(refund))))
    assert body["refunds"] == [{"amount": "12.50", "reason": "damaged", "at": "2024-05-03T12:00:00Z"}]
    assert body["net"] == "47.40"


def test_two_refunds_listed():
    refunds = [Refund(Decimal("10.00"), "late", PLACED), Refund(Decimal("5.90"), "late", PLACED)]
    body = json.loads(encode(order_to_api(order(*refunds))))
    assert [r["amount"] for r in body["refunds"]] == ["10.00", "5.90"]
    assert body["net"] == "44.00"
