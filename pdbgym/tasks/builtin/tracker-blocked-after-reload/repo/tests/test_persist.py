import pytest

from tracker import TicketStore, dumps, loads


def make_store():
    store = TicketStore()
    for title in ("Design schema", "Write migration", "Ship release"):
        store.create(title)
    store.block(3, 1)
    store.block(3, 2)
    store.close(1)
    store.assign(2, "ana")
    return store


def test_round_trip_keeps_titles_and_status():
    loaded = loads(dumps(make_store()))
    assert [(t.id, t.title, t.status.value) for t in loaded.all()] == [
        (1, "Design schema", "done"),
        (2, "Write migration", "in_progress"),
        (3, "Ship release", "open"),
    ]


def test_new_tickets_after_reload_continue_numbering():
    loaded = loads(dumps(make_store()))
    assert loaded.create("Announce").id == 4


def test_reloaded_store_keeps_blocking_links():
    loaded = loads(dumps(make_store()))
    assert not loaded.is_ready(loaded.find("Ship release"))
    assert [t.title for t in loaded.ready_queue()] == ["Write migration"]


def test_unknown_version_is_rejected():
    with pytest.raises(ValueError, match="version"):
        loads('{"version": 1, "tickets": {}, "next_id": 1}')
