from stock import Item, PurchaseSuggestion, Warehouse, suggest_purchases


def test_item_above_reorder_point_is_left_alone():
    warehouse = Warehouse([Item("WASHER", on_hand=300, reorder_point=100, daily_demand=10)])
    assert suggest_purchases(warehouse) == []


def test_low_item_is_topped_up_in_whole_packs():
    item = Item("GASKET", on_hand=60, reserved=20, reorder_point=50, order_multiple=25, daily_demand=5)
    # target = 50 + 70 = 120; position 40 -> short 80 -> 4 packs of 25
    assert suggest_purchases(Warehouse([item])) == [PurchaseSuggestion("GASKET", 100, 40)]


def test_open_purchase_orders_count_toward_the_position():
    warehouse = Warehouse([
        Item("HINGE", on_hand=30, reorder_point=40, order_multiple=10, daily_demand=2),
        Item("LATCH", on_hand=10, reorder_point=40, order_multiple=10, daily_demand=2),
    ])
    warehouse.place_purchase("HINGE", 60)
    # HINGE: 30 + 60 on the way = 90 > 40, nothing to order; LATCH: target 68, short 58 -> 60
    assert suggest_purchases(warehouse) == [PurchaseSuggestion("LATCH", 60, 10)]


def test_after_receiving_the_item_is_no_longer_suggested():
    warehouse = Warehouse([Item("HINGE", on_hand=30, reorder_point=40, order_multiple=10, daily_demand=2)])
    warehouse.place_purchase("HINGE", 60)
    warehouse.receive("HINGE", 60)
    assert suggest_purchases(warehouse) == []
