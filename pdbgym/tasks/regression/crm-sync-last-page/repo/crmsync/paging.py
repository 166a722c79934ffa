"""Plan the requests that cover a paged collection."""

from __future__ import annotations


def page_offsets(total: int, page_size: int) -> list[int]:
    """Offsets of the pages that together cover ``total`` items, ``page_size`` per page."""
    if page_size <= 0:
        raise ValueError(f"page_size must be positive, got {page_size}")
    pages = total // page_size
    return [page * page_size for page in range(pages)]
