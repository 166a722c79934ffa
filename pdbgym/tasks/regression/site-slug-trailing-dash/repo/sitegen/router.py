"""Map URL paths to pages. Paths are '/<section>/<slug>' or '/<slug>'."""

from __future__ import annotations

import re

from sitegen.pages import Page

# Slugs are part of permanent URLs: ASCII, lower case, single dashes, no dash at either end.
SLUG = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


class RouteError(ValueError):
    """A slug that cannot be part of a URL, or two pages claiming one URL."""


class Router:
    def __init__(self) -> None:
        self.routes: dict[str, Page] = {}

    def register(self, page: Page) -> str:
        """Add a page under its URL path and return that path."""
        for part in filter(None, (page.section, page.slug)):
            if not SLUG.fullmatch(part):
                raise RouteError(f"page {page.title!r}: {part!r} is not a valid URL slug "
                                 "(lower-case letters, digits and single inner dashes)")
        path = "/" + "/".join(filter(None, (page.section, page.slug)))
        if path in self.routes:
            raise RouteError(f"{path} is claimed by {self.routes[path].title!r} and {page.title!r}")
        self.routes[path] = page
        return path

    def resolve(self, path: str) -> Page:
        """The page at a path; a trailing slash is ignored."""
        key = path.rstrip("/") or "/"
        if key not in self.routes:
            raise RouteError(f"no page at {path}")
        return self.routes[key]
