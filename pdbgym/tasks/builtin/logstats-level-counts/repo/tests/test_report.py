from datetime import datetime

from logstats import build_report, parse_lines, summarize_log

LOG = """\
2024-05-01T12:00:00Z INFO [api] started
2024-05-01T12:00:05Z ERROR [billing] card declined (order=81)
Traceback (most recent call last):
  File "billing.py", line 10, in charge
2024-05-01T12:00:07Z WARNING [api] slow request
2024-05-01T12:01:00Z ERROR [billing] card declined (order=82)
2024-05-01T12:01:30Z CRITICAL [db] connection pool exhausted
2024-05-01T12:02:00Z INFO [api] stopping
"""


def test_report_from_a_list_of_records():
    report = build_report(list(parse_lines(LOG.splitlines())))
    assert report.by_level == {"INFO": 2, "WARNING": 1, "ERROR": 2, "CRITICAL": 1}
    assert report.noisiest_components == [("billing", 2), ("db", 1)]


def test_empty_log():
    report = summarize_log("")
    assert (report.total, report.error_rate, report.first) == (0, 0.0, None)


def test_summary_of_log_text():
    report = summarize_log(LOG)
    assert (report.first, report.last) == (datetime(2024, 5, 1, 12, 0), datetime(2024, 5, 1, 12, 2))
    assert report.total == 6
    assert report.error_rate == 0.5
    assert report.noisiest_components[0] == ("billing", 2)
