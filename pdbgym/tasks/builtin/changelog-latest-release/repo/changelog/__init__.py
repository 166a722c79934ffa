"""changelog: read a Keep-a-Changelog style file, find releases, compare versions."""

from changelog.parser import Release, parse_changelog
from changelog.query import changes_between, latest_release, next_version
from changelog.versions import Version, parse_version

__all__ = ["Release", "Version", "changes_between", "latest_release", "next_version", "parse_changelog",
           "parse_version"]
