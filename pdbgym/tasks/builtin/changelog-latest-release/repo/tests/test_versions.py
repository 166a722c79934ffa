import pytest

from changelog import parse_version


def test_parse_and_print():
    assert str(parse_version("v1.4.0-rc.1")) == "1.4.0-rc.1"
    with pytest.raises(ValueError, match="not a semantic version"):
        parse_version("1.4")


def test_prerelease_sorts_before_its_release():
    assert parse_version("1.4.0-rc.1") < parse_version("1.4.0")
    assert parse_version("1.3.2") < parse_version("1.4.0-rc.1")


def test_bump():
    assert str(parse_version("2.7.3").bump("minor")) == "2.8.0"
    assert str(parse_version("2.7.3").bump("major")) == "3.0.0"
