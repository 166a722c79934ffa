"""Text helpers: turning titles into URL slugs."""

from __future__ import annotations

import re
import unicodedata

_NOT_SLUG = re.compile(r"[^a-z0-9]+")


def ascii_fold(text: str) -> str:
    """Drop accents ('Café' -> 'Cafe') and any character with no ASCII form."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


def slugify(title: str) -> str:
    """A lower-case ASCII slug: runs of other characters become one '-', none at either end."""
    slug = _NOT_SLUG.sub("-", ascii_fold(title).lower())
    return slug.lstrip("-")
