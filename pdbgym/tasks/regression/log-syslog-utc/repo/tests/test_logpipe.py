from datetime import UTC, datetime

import pytest

from logpipe.alerts import error_rate_alerts
from logpipe.pipeline import ingest
from logpipe.sources import LogFormatError, parse_json_line, parse_syslog_line
from logpipe.windows import NaiveTimestamp, count_by_window, window_start

SYSLOG = [
    "<11>1 2024-03-01T10:00:05Z web1 checkout 311 - - payment gateway timeout",
    "<11>1 2024-03-01T10:01:10Z web1 checkout 311 - - payment gateway timeout",
    "<14>1 2024-03-01T10:02:00Z web1 checkout 311 - - order placed",
    "<14>1 2024-03-01T11:03:00+01:00 web2 search 12 - - query served",
]

JSON = [
    '{"ts": "2024-03-01T11:00:30+01:00", "service": "cart", "level": "WARN", "msg": "slow"}',
    '{"ts": "2024-03-01T10:00:50+00:00", "service": "cart", "level": "info", "msg": "ok"}',
]


def at(hour, minute, second=0):
    return datetime(2024, 3, 1, hour, minute, second, tzinfo=UTC)


def test_window_start_floors_in_utc():
    stamp = datetime.fromisoformat("2024-03-01T11:07:59+01:00")
    assert window_start(stamp, 300) == at(10, 5)


def test_naive_timestamps_are_refused():
    with pytest.raises(NaiveTimestamp):
        window_start(datetime(2024, 3, 1, 10, 0), 60)


def test_json_levels_are_normalised():
    assert [parse_json_line(line).level for line in JSON] == ["warning", "info"]


def test_json_lines_ingest():
    result = ingest(JSON, parse_json_line)
    assert result.quarantined == []
    assert result.counts == {(at(10, 0), "warning"): 1, (at(10, 0), "info"): 1}


def test_json_line_without_offset_is_quarantined():
    # The cart service once logged local wall-clock time; guessing UTC would misplace its events.
    lines = JSON + ['{"ts": "2024-03-01T11:00:30", "service": "cart", "level": "error", "msg": "x"}']
    result = ingest(lines, parse_json_line)
    assert len(result.quarantined) == 1
    assert "no UTC offset" in result.quarantined[0][1]
    assert sum(result.counts.values()) == 2


def test_bad_syslog_line_is_rejected():
    with pytest.raises(LogFormatError):
        parse_syslog_line("Mar  1 10:00:00 web1 checkout: old BSD format")


def test_syslog_severity_and_offset_stamp():
    event = parse_syslog_line(SYSLOG[3])
    assert (event.service, event.level, event.timestamp) == ("search", "info", at(10, 3))


def test_syslog_counts_by_window():
    counts = count_by_window([parse_syslog_line(line) for line in SYSLOG], 3600)
    assert counts == {(at(10, 0), "error"): 2, (at(10, 0), "info"): 2}


def test_syslog_error_rate_alert():
    alerts = error_rate_alerts([parse_syslog_line(line) for line in SYSLOG], width_s=300)
    assert [(a.service, a.window, a.errors, a.total) for a in alerts] == [("checkout", at(10, 0), 2, 3)]


def test_syslog_ingest_quarantines_nothing():
    result = ingest(SYSLOG, parse_syslog_line, width_s=3600)
    assert result.quarantined == []
    assert result.counts[(at(10, 0), "error")] == 2
