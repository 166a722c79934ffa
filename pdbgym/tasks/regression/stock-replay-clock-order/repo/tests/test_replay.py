import pytest

from stockflow.events import LogLineError, chronological, parse_log
from stockflow.ledger import NegativeStock, StockLedger
from stockflow.replay import replay, shipped_per_sku

AFTERNOON = """
2024-03-01 13:10 receive KETTLE 10
2024-03-01 15:45 ship KETTLE 4   # order 8812
2024-03-01 16:20 adjust KETTLE -1  # damaged in count
"""

FULL_DAY = """
# uploaded by scanner 2 after lunch
2024-03-01 10:15 ship KETTLE 6
2024-03-01 11:40 ship TOASTER 1
# uploaded by scanner 1 at 12:00
2024-03-01 8:05 receive KETTLE 12
2024-03-01 9:30 receive TOASTER 2
"""


def test_parse_log_lines():
    movements = parse_log(AFTERNOON)
    assert [(m.kind, m.quantity) for m in movements] == [("receive", 10), ("ship", 4), ("adjust", -1)]


def test_bad_line_is_named():
    with pytest.raises(LogLineError, match="line 2"):
        parse_log("2024-03-01 8:00 receive KETTLE 1\n2024-03-01 8:01 steal KETTLE 1")


def test_overselling_is_refused():
    ledger = StockLedger({"KETTLE": 2})
    with pytest.raises(NegativeStock, match="ship 3 KETTLE with 2 on hand"):
        ledger.apply(parse_log("2024-03-01 12:00 ship KETTLE 3")[0])
    assert ledger.levels == {"KETTLE": 2}


def test_afternoon_replay():
    assert replay({"KETTLE": 1}, AFTERNOON) == {"KETTLE": 6}


def test_shipped_totals():
    assert shipped_per_sku(FULL_DAY) == {"KETTLE": 6, "TOASTER": 1}


def test_same_minute_keeps_file_order():
    log = "2024-03-01 12:00 receive MUG 5\n2024-03-01 12:00 ship MUG 5"
    assert [m.kind for m in chronological(parse_log(log))] == ["receive", "ship"]


def test_full_day_replay_across_uploads():
    assert replay({}, FULL_DAY) == {"KETTLE": 6, "TOASTER": 1}


def test_morning_delivery_before_late_morning_order():
    log = "2024-03-02 10:05 ship MUG 3\n2024-03-02 9:55 receive MUG 3"
    assert replay({"MUG": 0}, log) == {"MUG": 0}
