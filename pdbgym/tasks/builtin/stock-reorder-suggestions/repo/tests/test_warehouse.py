import pytest

from stock import Item, StockError, Warehouse


def make_warehouse():
    return Warehouse([Item("BOLT-M6", on_hand=500), Item("NUT-M6", on_hand=40)])


def test_reserve_then_ship():
    warehouse = make_warehouse()
    warehouse.reserve("NUT-M6", 30)
    assert warehouse.item("NUT-M6").available == 10
    warehouse.ship("NUT-M6", 30)
    assert (warehouse.item("NUT-M6").on_hand, warehouse.item("NUT-M6").reserved) == (10, 0)


def test_cannot_reserve_more_than_available():
    warehouse = make_warehouse()
    warehouse.reserve("NUT-M6", 35)
    with pytest.raises(StockError, match="only 5 of NUT-M6 available"):
        warehouse.reserve("NUT-M6", 6)


def test_receiving_reduces_open_purchases():
    warehouse = make_warehouse()
    warehouse.place_purchase("BOLT-M6", 200)
    warehouse.receive("BOLT-M6", 150)
    item = warehouse.item("BOLT-M6")
    assert (item.on_hand, item.on_order) == (650, 50)
    assert [kind for kind, _, _ in warehouse.journal] == ["purchase", "receive"]


def test_movements_must_be_positive():
    with pytest.raises(StockError, match="must be positive"):
        make_warehouse().ship("BOLT-M6", 0)
