import pytest

from docstore import ConflictError, DocumentStore, NotFound


def test_create_get_update():
    store = DocumentStore()
    store.create("cfg", {"mode": "a"})
    doc = store.update("cfg", {"mode": "b"}, expected_revision=1)
    assert (doc.revision, store.get("cfg").body) == (2, {"mode": "b"})


def test_stale_writer_gets_a_conflict():
    store = DocumentStore()
    store.create("cfg", {"mode": "a"})
    store.patch("cfg", {"mode": "b"}, expected_revision=1)
    with pytest.raises(ConflictError, match="you read revision 1 but the store holds 2"):
        store.patch("cfg", {"mode": "c"}, expected_revision=1)


def test_returned_bodies_are_copies():
    store = DocumentStore()
    store.create("user:1", {"roles": ["dev"]})
    store.get("user:1").body["roles"].append("admin")
    assert store.get("user:1").body == {"roles": ["dev"]}


def test_delete_and_missing_keys():
    store = DocumentStore()
    store.create("tmp", {})
    store.delete("tmp", expected_revision=1)
    with pytest.raises(NotFound):
        store.get("tmp")


def test_single_writer_tracking_its_own_revision():
    store = DocumentStore()
    revision = store.create("counter", {"hits": 0}).revision
    for hits in range(1, 400):
        store.update("counter", {"hits": hits}, expected_revision=revision)
        revision += 1
    assert store.get("counter").body == {"hits": 399}
    assert store.get("counter").revision == revision == 400
