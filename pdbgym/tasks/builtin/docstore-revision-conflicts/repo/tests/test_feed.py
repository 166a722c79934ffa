from docstore import ChangeFeed, DocumentStore


def test_feed_pages_with_a_cursor():
    store = DocumentStore()
    feed = ChangeFeed(store)
    for n in range(5):
        store.create(f"doc{n}", {"n": n})
    first, cursor = feed.since(0, limit=3)
    second, cursor = feed.since(cursor, limit=3)
    assert [c.key for c in first + second] == ["doc0", "doc1", "doc2", "doc3", "doc4"]
    assert feed.since(cursor) == ([], 5)


def test_latest_revisions_forget_deleted_keys():
    store = DocumentStore()
    feed = ChangeFeed(store)
    store.create("a", {})
    store.create("b", {})
    store.update("a", {"x": 1}, expected_revision=1)
    store.delete("b", expected_revision=1)
    assert feed.latest_revisions() == {"a": 2}
