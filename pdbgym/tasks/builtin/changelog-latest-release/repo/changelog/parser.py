"""Split a changelog into releases: ``## [1.2.0] - 2024-03-01`` headings with ``### Added`` sections."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from changelog.versions import Version, parse_version

_RELEASE = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d\d-\d\d))?\s*$")
_SECTION = re.compile(r"^### (?P<name>\w+)\s*$")


@dataclass
class Release:
    version: Version | None  # None for the [Unreleased] section
    date: str | None
    sections: dict[str, list[str]] = field(default_factory=dict)


def parse_changelog(text: str) -> list[Release]:
    releases: list[Release] = []
    section: list[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if match := _RELEASE.match(line):
            label = match["version"]
            version = None if label.lower() == "unreleased" else parse_version(label)
            releases.append(Release(version, match["date"]))
            section = None
        elif match := _SECTION.match(line):
            if not releases:
                raise ValueError(f"line {number}: section {match['name']!r} before any release heading")
            section = releases[-1].sections.setdefault(match["name"], [])
        elif line.startswith("- ") and section is not None:
            section.append(line[2:].strip())
    return releases
