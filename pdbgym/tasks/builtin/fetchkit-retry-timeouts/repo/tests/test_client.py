import json

import pytest

from fetchkit import ApiError, JsonClient


class ScriptedTransport:
    """Plays back canned outcomes and records each request it was given."""

    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)
        self.requests = []

    def request(self, method, url, body):
        self.requests.append((method, url, body))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        status, payload = outcome
        return status, json.dumps(payload).encode()


def make_client(transport):
    return JsonClient("https://api.example.test/v1/", transport, sleep=lambda seconds: None)


def test_get_builds_sorted_query():
    transport = ScriptedTransport((200, {"items": []}))
    assert make_client(transport).get("/orders", status="open", page=2) == {"items": []}
    assert transport.requests[0][1] == "https://api.example.test/v1/orders?page=2&status=open"


def test_post_sends_json_body():
    transport = ScriptedTransport((201, {"id": 7}))
    assert make_client(transport).post("orders", {"sku": "A-1", "qty": 2}) == {"id": 7}
    assert json.loads(transport.requests[0][2]) == {"sku": "A-1", "qty": 2}


def test_http_errors_are_not_retried():
    transport = ScriptedTransport((404, {"error": "no such order"}), (200, {}))
    with pytest.raises(ApiError, match="404"):
        make_client(transport).get("orders/9")
    assert len(transport.requests) == 1


def test_slow_upstream_is_retried():
    transport = ScriptedTransport(TimeoutError("read timed out"), ConnectionResetError(), (200, {"ok": True}))
    client = make_client(transport)
    assert client.get("health") == {"ok": True}
    assert client.retries == [(2, "TimeoutError"), (3, "ConnectionResetError")]
