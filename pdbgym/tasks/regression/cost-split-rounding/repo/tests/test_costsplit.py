import pytest

from costsplit.allocation import AllocationError, split_cents
from costsplit.invoices import SharedInvoice, post_shared_invoices, shared_invoice_journal
from costsplit.ledger import Journal, JournalLine, Ledger, UnbalancedJournal

HEADCOUNT = {"eng": 12, "ops": 5, "sales": 7}


def test_even_split():
    assert split_cents(900, {"a": 1, "b": 1, "c": 1}) == {"a": 300, "b": 300, "c": 300}


def test_leftover_cent_goes_to_largest_remainder():
    assert split_cents(100, {"a": 1, "b": 1, "c": 1}) == {"a": 34, "b": 33, "c": 33}


def test_zero_weights_rejected():
    with pytest.raises(AllocationError):
        split_cents(100, {"a": 0})


def test_ledger_rejects_unbalanced_manual_journal():
    ledger = Ledger()
    journal = Journal("manual accrual", [JournalLine("6200-rent", debit_cents=150001),
                                         JournalLine("2100-accruals", credit_cents=150000)])
    with pytest.raises(UnbalancedJournal, match="150001 != credits 150000"):
        ledger.post(journal)
    assert ledger.balances == {} and ledger.posted == []


def test_round_invoice_posts():
    ledger = Ledger()
    post_shared_invoices(ledger, [SharedInvoice("acme", "A-1", 240000, "6100-software")], HEADCOUNT)
    assert ledger.balances["6100-software/eng"] == 120000
    assert ledger.balances["2000-payables/acme"] == -240000
    assert ledger.trial_balance() == 0


def test_journal_lines_skip_zero_shares():
    journal = shared_invoice_journal(SharedInvoice("acme", "A-2", 500, "6100"), {"eng": 1, "ops": 0})
    assert [line.account for line in journal.lines] == ["6100/eng", "2000-payables/acme"]


def test_licence_invoice_split_three_ways():
    ledger = Ledger()
    post_shared_invoices(ledger, [SharedInvoice("jetbr", "J-77", 20000, "6100")], {"a": 1, "b": 1, "c": 1})
    shares = sorted(ledger.balances[f"6100/{c}"] for c in "abc")
    assert sum(shares) == 20000 and shares[-1] - shares[0] <= 1
    assert ledger.trial_balance() == 0


def test_quarter_of_invoices_posts():
    invoices = [SharedInvoice("acme", f"Q-{n}", cents, "6100") for n, cents in enumerate([99999, 12345, 1007])]
    ledger = Ledger()
    post_shared_invoices(ledger, invoices, HEADCOUNT)
    assert len(ledger.posted) == 3
    assert ledger.balances["2000-payables/acme"] == -(99999 + 12345 + 1007)
    assert ledger.trial_balance() == 0
