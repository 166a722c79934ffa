from datetime import date

import pytest

from bankimport.formats import UnknownFormat
from bankimport.ledger import ReconciliationError, reconcile
from bankimport.reader import read_statement

CHASE = """# format: chase
date,payee,amount
03/01/2024,Payroll,"2,500.00"
03/02/2024,Grocer,-84.15
03/05/2024,Rent,"-1,200.00"
"""

SPARKASSE_LARGE = """# format: Sparkasse
Datum;Empfaenger;Betrag
01.03.2024;Gehalt;3.100,00
04.03.2024;Miete;-1.250,00
"""

SPARKASSE_SMALL = """# format: sparkasse
Datum;Empfaenger;Betrag
02.03.2024;Baeckerei;-4,80
03.03.2024;Erstattung;12,5
"""


def test_chase_statement():
    transactions = read_statement(CHASE)
    assert [t.cents for t in transactions] == [250000, -8415, -120000]
    assert transactions[0].booked == date(2024, 3, 1)


def test_sparkasse_grouped_amounts():
    transactions = read_statement(SPARKASSE_LARGE)
    assert [t.cents for t in transactions] == [310000, -125000]
    assert transactions[1].payee == "Miete"


def test_sparkasse_small_amounts():
    transactions = read_statement(SPARKASSE_SMALL)
    assert [t.cents for t in transactions] == [-480, 1250]


def test_reconcile_sparkasse_month():
    transactions = read_statement(SPARKASSE_LARGE) + read_statement(SPARKASSE_SMALL)
    assert reconcile(10000, transactions, 10000 + 310000 - 125000 - 480 + 1250) == 195770


def test_reconcile_reports_difference():
    with pytest.raises(ReconciliationError, match=r"off by 0\.01"):
        reconcile(0, read_statement(CHASE), 121586)


def test_unknown_format_is_named():
    with pytest.raises(UnknownFormat, match="ing-diba"):
        read_statement("# format: ing-diba\n01.03.2024;x;1,00")
