from datetime import datetime

from logstats import parse_lines
from logstats.parse import parse_line


def test_parse_one_line():
    record = parse_line("2024-05-01T12:00:03Z ERROR [billing] card declined (order=81)\n")
    assert record.timestamp == datetime(2024, 5, 1, 12, 0, 3)
    assert (record.level, record.component, record.message) == ("ERROR", "billing", "card declined (order=81)")


def test_non_record_lines_are_skipped():
    lines = [
        "2024-05-01T12:00:03Z INFO [api] started",
        "Traceback (most recent call last):",
        "",
        "2024-05-01T12:00:04Z WARNING [api.auth] slow token check",
    ]
    assert [r.component for r in parse_lines(lines)] == ["api", "api.auth"]
