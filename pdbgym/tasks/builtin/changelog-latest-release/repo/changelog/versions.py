"""Semantic versions: MAJOR.MINOR.PATCH with an optional pre-release tag (1.4.0-rc.1)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.]+))?$")


@dataclass(frozen=True)
class Version:
    major: str
    minor: str
    patch: str
    prerelease: str = ""

    def __str__(self) -> str:
        core = f"{self.major}.{self.minor}.{self.patch}"
        return f"{core}-{self.prerelease}" if self.prerelease else core

    def sort_key(self) -> tuple:
        # A pre-release sorts before the release it precedes: 1.4.0-rc.1 < 1.4.0.
        return (self.major, self.minor, self.patch, self.prerelease == "", self.prerelease)

    def __lt__(self, other: Version) -> bool:
        return self.sort_key() < other.sort_key()

    def bump(self, part: str) -> Version:
        major, minor, patch = int(self.major), int(self.minor), int(self.patch)
        if part == "major":
            return Version(str(major + 1), "0", "0")
        if part == "minor":
            return Version(str(major), str(minor + 1), "0")
        if part == "patch":
            return Version(str(major), str(minor), str(patch + 1))
        raise ValueError(f"unknown version part {part!r}; use major, minor or patch")


def parse_version(text: str) -> Version:
    match = _VERSION.match(text.strip())
    if match is None:
        raise ValueError(f"not a semantic version: {text!r}")
    major, minor, patch, prerelease = match.groups()
    return Version(major, minor, patch, prerelease or "")
