"""Save and load a store as JSON text."""

from __future__ import annotations

import json

from tracker.models import Ticket
from tracker.store import TicketStore

FORMAT_VERSION = 2


def dumps(store: TicketStore) -> str:
    payload = {
        "version": FORMAT_VERSION,
        "next_id": store._next_id,
        "tickets": {ticket.id: ticket.to_dict() for ticket in store.all()},
    }
    return json.dumps(payload, indent=2, sort_keys=True)


def loads(text: str) -> TicketStore:
    payload = json.loads(text)
    version = payload.get("version")
    if version != FORMAT_VERSION:
        raise ValueError(f"unsupported tracker file version {version!r} (expected {FORMAT_VERSION})")
    store = TicketStore()
    store._tickets = {key: Ticket.from_dict(raw) for key, raw in payload["tickets"].items()}
    store._next_id = int(payload["next_id"])
    return store
