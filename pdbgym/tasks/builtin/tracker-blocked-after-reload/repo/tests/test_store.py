import pytest

from tracker import Status, TicketStore, UnknownTicket


@pytest.fixture
def store():
    store = TicketStore()
    store.create("Design schema", labels=["db"])
    store.create("Write migration", labels=["db", "backend"])
    store.create("Ship release")
    return store


def test_ids_are_sequential(store):
    assert [t.id for t in store.all()] == [1, 2, 3]
    assert store.create("Hotfix").id == 4


def test_assign_moves_ticket_in_progress(store):
    store.assign(2, "ana")
    assert store.get(2).status is Status.IN_PROGRESS
    assert [t.title for t in store.by_assignee("ana")] == ["Write migration"]


def test_blocked_ticket_is_not_ready_until_blocker_done(store):
    store.block(3, 2)
    assert not store.is_ready(store.get(3))
    assert [t.title for t in store.open_blockers(store.get(3))] == ["Write migration"]
    store.close(2)
    assert store.is_ready(store.get(3))


def test_unknown_ticket_raises(store):
    with pytest.raises(UnknownTicket):
        store.assign(99, "bo")
    with pytest.raises(ValueError):
        store.block(1, 1)


def test_deleted_blocker_no_longer_blocks(store):
    store.block(3, 1)
    store.delete(1)
    assert store.is_ready(store.find("Ship release"))
