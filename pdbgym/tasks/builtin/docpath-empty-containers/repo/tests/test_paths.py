import pytest

from docpath import format_path, parse_path


def test_round_trip():
    path = ("servers", 0, "ports", 12, "name")
    assert format_path(path) == "servers[0].ports[12].name"
    assert parse_path("servers[0].ports[12].name") == path


def test_bad_path():
    with pytest.raises(ValueError, match="bad path"):
        parse_path("servers[x]")
