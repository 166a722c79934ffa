"""Build a site: register every page and list them in a sitemap, newest first."""

from __future__ import annotations

from sitegen.pages import parse_page
from sitegen.router import Router


def build(sources: dict[str, str], base_url: str) -> tuple[Router, list[str]]:
    """(router, sitemap URLs) for page sources keyed by file name."""
    router = Router()
    pages = [parse_page(text, origin=name) for name, text in sorted(sources.items())]
    dated = []
    for page in pages:
        dated.append((page.published, base_url.rstrip("/") + router.register(page)))
    return router, [url for _, url in sorted(dated, reverse=True)]
