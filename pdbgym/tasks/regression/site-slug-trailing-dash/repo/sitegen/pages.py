"""Pages: a front-matter block (``key: value`` lines up to a ``---`` line) and a body."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from sitegen.text import slugify


class PageError(ValueError):
    """A page source without the front matter a page needs."""


@dataclass(frozen=True)
class Page:
    title: str
    slug: str
    published: date
    body: str
    section: str = ""


def parse_page(source: str, origin: str = "<page>") -> Page:
    """Read one page; ``slug`` defaults to the slugified title, ``section`` to none."""
    head, separator, body = source.partition("\n---\n")
    if not separator:
        raise PageError(f"{origin}: front matter must end with a '---' line")
    meta = {}
    for line in head.strip().splitlines():
        key, _, value = line.partition(":")
        meta[key.strip().lower()] = value.strip()
    if "title" not in meta or "date" not in meta:
        raise PageError(f"{origin}: front matter needs 'title' and 'date'")
    return Page(
        title=meta["title"],
        slug=meta.get("slug") or slugify(meta["title"]),
        published=date.fromisoformat(meta["date"]),
        body=body.strip(),
        section=meta.get("section", ""),
    )
