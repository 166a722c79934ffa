import json

import pytest

from crmsync.billing import bill, invoice_lines
from crmsync.export import ExportSnapshot
from crmsync.mirror import Mirror, UnknownCustomer
from crmsync.paging import page_offsets


def snapshot(n):
    rows = [{"id": f"c{i:03d}", "plan": "pro" if i % 3 == 0 else "basic"} for i in range(n)]
    return ExportSnapshot("\n".join(json.dumps(row) for row in rows))


def test_offsets_for_exact_pages():
    assert page_offsets(60, 20) == [0, 20, 40]


def test_page_size_must_be_positive():
    with pytest.raises(ValueError):
        page_offsets(10, 0)


def test_export_caps_page_size():
    with pytest.raises(ValueError, match="1..50"):
        snapshot(5).page(0, 51)


def test_pull_full_pages():
    mirror = Mirror()
    assert mirror.pull(snapshot(40)) == 40
    assert mirror.customer("c039")["plan"] == "pro"


def test_unknown_customer_is_named():
    mirror = Mirror()
    mirror.pull(snapshot(20))
    with pytest.raises(UnknownCustomer, match="c999"):
        bill(mirror, {"c999": 5})


def test_bill_early_customers():
    mirror = Mirror()
    mirror.pull(snapshot(40))
    invoices = bill(mirror, {"c000": 100, "c001": 1000})
    assert invoices == {"c000": 100, "c001": 2000}
    assert invoice_lines(mirror, invoices) == ["c000  pro      1.00", "c001  basic   20.00"]


def test_bill_newest_customers():
    mirror = Mirror()
    mirror.pull(snapshot(47))
    assert bill(mirror, {"c045": 10, "c046": 10}) == {"c045": 10, "c046": 20}


def test_small_crm_fits_one_page():
    mirror = Mirror()
    mirror.pull(snapshot(7), page_size=50)
    assert bill(mirror, {"c006": 3}) == {"c006": 3}


def test_offsets_cover_a_partial_last_page():
    assert page_offsets(47, 20) == [0, 20, 40]
    assert page_offsets(3, 50) == [0]
