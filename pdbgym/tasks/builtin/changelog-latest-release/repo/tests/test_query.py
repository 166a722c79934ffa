from changelog import changes_between, latest_release, next_version, parse_changelog

CHANGELOG = """\
# Changelog

## [Unreleased]
### Added
- Export to Parquet

## [1.10.0] - 2024-06-01
### Added
- Streaming reader
### Fixed
- Crash on empty files

## [1.9.2] - 2024-04-11
### Fixed
- Wrong encoding guess for Latin-1 files

## [1.9.1] - 2024-03-02
### Fixed
- Off-by-one in page numbers

## [1.2.0] - 2023-01-15
### Added
- JSON output
"""


def test_sections_are_parsed():
    releases = parse_changelog(CHANGELOG)
    assert [str(r.version) for r in releases] == ["None", "1.10.0", "1.9.2", "1.9.1", "1.2.0"]
    assert releases[1].sections == {"Added": ["Streaming reader"], "Fixed": ["Crash on empty files"]}


def test_latest_release_among_single_digit_versions():
    releases = parse_changelog(CHANGELOG.replace("1.10.0", "1.9.3"))
    assert str(latest_release(releases).version) == "1.9.3"


def test_latest_release_is_the_highest_version():
    assert str(latest_release(parse_changelog(CHANGELOG)).version) == "1.10.0"


def test_next_version_after_double_digit_minor():
    assert str(next_version(parse_changelog(CHANGELOG))) == "1.11.0"


def test_changes_between_two_patch_releases():
    assert changes_between(parse_changelog(CHANGELOG), "1.9.1", "1.9.2") == [
        "Fixed: Wrong encoding guess for Latin-1 files"
    ]
