import pytest

from fulfil.allocation import InsufficientStock, allocate
from fulfil.orders import OrderError, parse_order
from fulfil.picking import PickError, PickLine, pick_lists, shipments
from fulfil.stock import warehouses_by_distance


def stock():
    return {
        "leeds": {"kettle": 4, "toaster": 0, "mug": 50},
        "bristol": {"kettle": 10, "toaster": 3, "mug": 5},
        "dover": {"kettle": 0, "toaster": 6, "mug": 0},
    }


def order(lines, zone="north", order_id="o1"):
    return parse_order({"id": order_id, "zone": zone, "lines": [{"sku": s, "qty": q} for s, q in lines]})


def test_nearest_first():
    assert warehouses_by_distance("north") == ["leeds", "bristol", "dover"]
    assert warehouses_by_distance("south") == ["bristol", "dover", "leeds"]


def test_order_quantities_validated():
    with pytest.raises(OrderError, match="mug"):
        order([("mug", 0)])


def test_single_warehouse_order():
    inventory = stock()
    lists = pick_lists(allocate(order([("kettle", 2), ("mug", 10)]), inventory))
    assert lists == {"leeds": [PickLine("o1", "kettle", 2), PickLine("o1", "mug", 10)]}
    assert inventory["leeds"]["kettle"] == 2


def test_line_split_across_warehouses():
    inventory = stock()
    lists = pick_lists(allocate(order([("kettle", 6)]), inventory))
    assert lists == {"leeds": [PickLine("o1", "kettle", 4)], "bristol": [PickLine("o1", "kettle", 2)]}


def test_insufficient_stock_leaves_stock_untouched():
    inventory = stock()
    with pytest.raises(InsufficientStock, match="toaster needs 10, only 9"):
        allocate(order([("toaster", 10)]), inventory)
    assert inventory == stock()


def test_pickers_never_get_empty_lines():
    with pytest.raises(PickError):
        PickLine("o9", "mug", 0)


def test_toaster_ships_from_bristol():
    lists = pick_lists(allocate(order([("toaster", 2)]), stock()))
    assert lists == {"bristol": [PickLine("o1", "toaster", 2)]}


def test_parcels_for_mixed_order():
    allocations = allocate(order([("mug", 1), ("toaster", 5)], zone="wales"), stock())
    assert shipments(allocations) == [("o1", "bristol"), ("o1", "dover")]


def test_later_orders_see_earlier_allocations():
    inventory = stock()
    allocate(order([("kettle", 4)], order_id="o1"), inventory)
    lists = pick_lists(allocate(order([("kettle", 3)], order_id="o2"), inventory))
    assert lists == {"bristol": [PickLine("o2", "kettle", 3)]}


def test_allocations_only_name_warehouses_that_ship():
    allocations = allocate(order([("toaster", 4)]), stock())
    assert [(a.warehouse, a.quantity) for a in allocations] == [("bristol", 3), ("dover", 1)]
