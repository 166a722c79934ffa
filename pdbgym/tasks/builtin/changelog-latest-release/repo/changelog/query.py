"""Questions people ask of a changelog."""

from __future__ import annotations

from changelog.parser import Release
from changelog.versions import Version, parse_version

BREAKING_SECTIONS = ("Removed", "Changed")


def released(releases: list[Release], include_prereleases: bool = False) -> list[Release]:
    return [r for r in releases if r.version is not None and (include_prereleases or not r.version.prerelease)]


def latest_release(releases: list[Release], include_prereleases: bool = False) -> Release:
    """The highest version, wherever it sits in the file (changelogs are not always in order)."""
    candidates = released(releases, include_prereleases)
    if not candidates:
        raise ValueError("the changelog has no releases yet")
    return max(candidates, key=lambda release: release.version)


def changes_between(releases: list[Release], after: str, up_to: str) -> list[str]:
    """Entries of the releases in (after, up_to], oldest release first, as 'Section: entry'."""
    low, high = parse_version(after), parse_version(up_to)
    picked = sorted((r for r in released(releases, True) if low < r.version and not high < r.version),
                    key=lambda release: release.version)
    return [f"{name}: {entry}" for release in picked for name, entries in release.sections.items()
            for entry in entries]


def next_version(releases: list[Release]) -> Version:
    """Bump from the latest release according to what [Unreleased] holds."""
    unreleased = next((r for r in releases if r.version is None), None)
    current = latest_release(releases).version
    if unreleased is None or not any(unreleased.sections.values()):
        raise ValueError("nothing unreleased to version")
    if any(unreleased.sections.get(name) for name in BREAKING_SECTIONS):
        return current.bump("major")
    if unreleased.sections.get("Added"):
        return current.bump("minor")
    return current.bump("patch")
