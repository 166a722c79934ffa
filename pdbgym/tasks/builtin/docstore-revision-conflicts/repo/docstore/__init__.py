"""docstore: JSON-like documents with revisions, conflict detection and a change feed."""

from docstore.feed import ChangeFeed
from docstore.store import ConflictError, Document, DocumentStore, NotFound

__all__ = ["ChangeFeed", "ConflictError", "Document", "DocumentStore", "NotFound"]
