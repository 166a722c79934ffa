"""Map domain objects to JSON-ready dicts (str, int, float, bool, None, lists, dicts only)."""

from __future__ import annotations

from datetime import UTC

from shopapi.models import Order, Refund
from shopapi.money import to_api_money


def _timestamp(moment) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def refund_to_api(refund: Refund) -> dict:
    return {"amount": refund.amount, "reason": refund.reason, "at": _timestamp(refund.at)}


def order_to_api(order: Order) -> dict:
    """The order resource: money as two-decimal strings, times as UTC 'Z' stamps."""
    return {
        "id": order.order_id,
        "customer": order.customer,
        "total": to_api_money(order.total),
        "placed_at": _timestamp(order.placed_at),
        "refunds": [refund_to_api(refund) for refund in order.refunds],
        "net": to_api_money(order.total - order.refunded()),
    }
