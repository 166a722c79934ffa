"""The ``symptom`` task family: small two-module projects whose bug is told by its symptom alone.

Each project (a *template*: checkout, booking, inventory, grades, paging, thermostat) is a package with
a module of helpers and a module the tests import, a test per behaviour, and several *sites* where one
line can go wrong in one of five ways: ``off_by_one``, ``wrong_comparison``, ``wrong_default``,
``swapped_arguments``, ``wrong_key``. A task is one site's bug: the statement describes what a user sees
and names the failing tests, never the file or function to fix, and no function is named after the
operation it gets wrong. The fix is one line, in the helper module or the tested one, so the task
ladder puts every task on rung 1 (``difficulty.rung``: a one-line fix the statement does not locate).

Sites are dealt round-robin over the bug kinds (``SITES``), so any ``count`` of at least five covers
every kind and 18 cover every site; the seed draws the package name and every constant, hence the
tests' literals. Tasks of one template share ``source_module``: a split by source module keeps a
project's variants on one side. Nothing here runs; ``tasks validate`` checks what it writes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

KINDS = ("off_by_one", "wrong_comparison", "wrong_default", "swapped_arguments", "wrong_key")


@dataclass(frozen=True)
class Site:
    """One line that can go wrong: ``good`` and ``bad`` are whole lines of ``path`` (package-relative)."""

    kind: str
    path: str
    function: str
    good: str
    bad: str
    failing: tuple[str, ...]  # test functions the bug fails (each passes on the fixed code)
    statement: str  # what a user sees, without naming the site


@dataclass(frozen=True)
class Project:
    """A template filled in: package-relative module texts, the test file's text, and its sites."""

    template: str
    modules: dict[str, str]
    tests: str
    test_file: str
    sites: dict[str, Site]


def _checkout(rng: random.Random, pkg: str) -> Project:
    free_from = rng.choice([40, 50, 60, 75, 100])
    standard = rng.choice([1.5, 2.0, 2.5])
    express = standard + rng.choice([2.0, 3.0, 4.0])
    sale = free_from // 2 + rng.randint(2, 9)
    listed = sale + rng.randint(3, 9)
    small = rng.randint(5, free_from // 4)
    weight = rng.randint(2, 5)
    pricing = f'''FREE_SHIPPING_FROM = {free_from}
STANDARD_RATE = {standard}
EXPRESS_RATE = {express}


def line_cost(item):
    return item["price"] * item["qty"]


def ships_free(subtotal):
    return subtotal >= FREE_SHIPPING_FROM


def shipping_fee(weight_kg, per_kg=STANDARD_RATE):
    return round(weight_kg * per_kg, 2)
'''
    checkout = f'''from {pkg}.pricing import line_cost, shipping_fee, ships_free


def order_total(items, weight_kg):
    subtotal = sum(line_cost(item) for item in items)
    if ships_free(subtotal):
        return subtotal
    return round(subtotal + shipping_fee(weight_kg), 2)
'''
    tests = f'''from {pkg}.checkout import order_total


def test_an_order_of_exactly_the_free_shipping_amount_pays_no_shipping():
    assert order_total([dict(price={free_from}, list_price={free_from}, qty=1)], {weight}) == {free_from}


def test_sale_items_are_charged_at_the_sale_price():
    assert order_total([dict(price={sale}, list_price={listed}, qty=2)], {weight}) == {2 * sale}


def test_small_orders_pay_standard_shipping_by_weight():
    assert order_total([dict(price={small}, list_price={small}, qty=1)], {weight}) == {round(small + round(weight * standard, 2), 2)}


def test_an_empty_order_costs_nothing():
    assert order_total([], 0) == 0
'''
    sites = {
        "threshold": Site("wrong_comparison", "pricing.py", "ships_free", "    return subtotal >= FREE_SHIPPING_FROM",
                          "    return subtotal > FREE_SHIPPING_FROM",
                          ("test_an_order_of_exactly_the_free_shipping_amount_pays_no_shipping",),
                          f"An order that comes to exactly {free_from}, the amount from which shipping is free, is "
                          "still charged shipping. Orders above that amount ship free as they should."),
        "sale": Site("wrong_key", "pricing.py", "line_cost", '    return item["price"] * item["qty"]',
                     '    return item["list_price"] * item["qty"]', ("test_sale_items_are_charged_at_the_sale_price",),
                     f"Items on sale are billed at their list price: two items on sale at {sale} (list price "
                     f"{listed}) come to {2 * listed} instead of {2 * sale}."),
        "rate": Site("wrong_default", "pricing.py", "shipping_fee", "def shipping_fee(weight_kg, per_kg=STANDARD_RATE):",
                     "def shipping_fee(weight_kg, per_kg=EXPRESS_RATE):",
                     ("test_small_orders_pay_standard_shipping_by_weight",),
                     f"Orders that do not ship free are charged {express} a kilogram for shipping; standard "
                     f"shipping costs {standard} a kilogram, and nobody asked for anything faster."),
    }
    return Project("checkout", {"pricing.py": pricing, "checkout.py": checkout}, tests, "tests/test_checkout.py", sites)


def _booking(rng: random.Random, pkg: str) -> Project:
    opening, length = rng.choice([8, 9, 10]), rng.choice([1, 2])
    closing = opening + rng.randint(3, 5) * length
    hours, minutes = rng.randint(7, 11), rng.choice([15, 30, 45])
    slots = '''def slot_starts(opening, closing, length):
    return list(range(opening, closing - length + 1, length))


def clashes(start, end, booked_start, booked_end):
    return start < booked_end and booked_start < end


def clock(hours, minutes):
    return hours * 60 + minutes
'''
    booking = f'''from {pkg}.slots import clashes, clock, slot_starts


def free_slots(opening, closing, length, booked=()):
    free = []
    for start in slot_starts(opening, closing, length):
        if not any(clashes(start, start + length, b_start, b_end) for b_start, b_end in booked):
            free.append(start)
    return free


def minutes_since_midnight(text):
    hours, minutes = text.split(":")
    return clock(int(hours), int(minutes))
'''
    tests = f'''from {pkg}.booking import free_slots, minutes_since_midnight


def test_every_slot_of_an_empty_day_is_offered():
    assert free_slots({opening}, {closing}, {length}) == {list(range(opening, closing, length))}


def test_a_slot_starting_when_a_booking_ends_is_free():
    free = free_slots({opening}, {closing}, {length}, [({opening}, {opening + length})])
    assert {opening} not in free and {opening + length} in free


def test_times_of_day_count_minutes_from_midnight():
    assert minutes_since_midnight("{hours:02d}:{minutes:02d}") == {hours * 60 + minutes}


def test_a_fully_booked_day_has_no_free_slot():
    assert free_slots({opening}, {closing}, {length}, [({opening}, {closing})]) == []
'''
    sites = {
        "last": Site("off_by_one", "slots.py", "slot_starts", "    return list(range(opening, closing - length + 1, length))",
                     "    return list(range(opening, closing - length, length))",
                     ("test_every_slot_of_an_empty_day_is_offered",),
                     f"On a day with no bookings, opening at {opening} and closing at {closing} with slots of "
                     f"{length} hour{'s' if length > 1 else ''}, the slot starting at {closing - length} is never offered, though it ends "
                     "at closing time."),
        "touching": Site("wrong_comparison", "slots.py", "clashes",
                         "    return start < booked_end and booked_start < end",
                         "    return start <= booked_end and booked_start < end",
                         ("test_a_slot_starting_when_a_booking_ends_is_free",),
                         f"A slot that starts at {opening + length}, the moment an earlier booking ends, is shown as "
                         "taken. Back-to-back bookings should be possible."),
        "clock": Site("swapped_arguments", "booking.py", "minutes_since_midnight",
                      "    return clock(int(hours), int(minutes))", "    return clock(int(minutes), int(hours))",
                      ("test_times_of_day_count_minutes_from_midnight",),
                      f'The time "{hours:02d}:{minutes:02d}" is read as {minutes * 60 + hours} minutes after midnight '
                      f"instead of {hours * 60 + minutes}."),
    }
    return Project("booking", {"slots.py": slots, "booking.py": booking}, tests, "tests/test_booking.py", sites)


def _inventory(rng: random.Random, pkg: str) -> Project:
    on_hand, target = rng.randint(1, 6), rng.randint(10, 20)
    costs = rng.sample(range(2, 30), 4)
    counts = [rng.randint(1, 9) for _ in costs]
    while len({n * c for n, c in zip(counts, costs, strict=True)}) < len(costs):  # a ranking without ties
        counts = [rng.randint(1, 9) for _ in costs]
    skus = [f"{c}{n}" for c, n in zip("ABCD", rng.sample(range(100, 999), 4), strict=True)]
    products = [dict(sku=s, on_hand=n, target=n, unit_cost=c, unit_price=2 * c)
                for s, n, c in zip(skus, counts, costs, strict=True)]
    ranked = [p["sku"] for p in sorted(products, key=lambda p: p["on_hand"] * p["unit_cost"], reverse=True)]
    stock = '''def shortfall(on_hand, target):
    return max(target - on_hand, 0)


def stock_value(product):
    return product["on_hand"] * product["unit_cost"]
'''
    purchasing = f'''from {pkg}.stock import shortfall, stock_value


def reorder_quantities(products):
    return {{p["sku"]: shortfall(p["on_hand"], p["target"]) for p in products if p["on_hand"] < p["target"]}}


def warehouse_value(products):
    return sum(stock_value(p) for p in products)


def most_valuable(products, count=3):
    ranked = sorted(products, key=stock_value, reverse=True)
    return [p["sku"] for p in ranked[:count]]
'''
    tests = f'''from {pkg}.purchasing import most_valuable, reorder_quantities, warehouse_value

PRODUCTS = {products!r}


def test_products_below_target_are_reordered_up_to_it():
    low = dict(sku="Z1", on_hand={on_hand}, target={target}, unit_cost=1, unit_price=2)
    assert reorder_quantities(PRODUCTS + [low]) == {{"Z1": {target - on_hand}}}


def test_stock_is_valued_at_what_it_cost():
    assert warehouse_value(PRODUCTS) == {sum(p["on_hand"] * p["unit_cost"] for p in products)}


def test_the_two_most_valuable_lines_are_listed():
    assert most_valuable(PRODUCTS, 2) == {ranked[:2]!r}


def test_an_empty_warehouse_is_worth_nothing():
    assert warehouse_value([]) == 0 and most_valuable([]) == []
'''
    sites = {
        "shortfall": Site("swapped_arguments", "purchasing.py", "reorder_quantities",
                          '    return {p["sku"]: shortfall(p["on_hand"], p["target"]) for p in products if p["on_hand"] < p["target"]}',
                          '    return {p["sku"]: shortfall(p["target"], p["on_hand"]) for p in products if p["on_hand"] < p["target"]}',
                          ("test_products_below_target_are_reordered_up_to_it",),
                          f"A product with {on_hand} in stock and a target of {target} is put on the purchase list with "
                          f"a quantity of 0; it should be {target - on_hand}."),
        "cost": Site("wrong_key", "stock.py", "stock_value", '    return product["on_hand"] * product["unit_cost"]',
                     '    return product["on_hand"] * product["unit_price"]', ("test_stock_is_valued_at_what_it_cost",),
                     "The warehouse's stock is valued at twice what it cost (at the selling price); the books need "
                     "it at cost."),
        "top": Site("off_by_one", "purchasing.py", "most_valuable", "    return [p[\"sku\"] for p in ranked[:count]]",
                    "    return [p[\"sku\"] for p in ranked[:count - 1]]", ("test_the_two_most_valuable_lines_are_listed",),
                    f"Asked for the two most valuable stock lines, the report lists only {ranked[0]}; {ranked[1]} "
                    "is missing."),
    }
    return Project("inventory", {"stock.py": stock, "purchasing.py": purchasing}, tests, "tests/test_purchasing.py",
                   sites)


def _grades(rng: random.Random, pkg: str) -> Project:
    mark = rng.choice([40, 50, 60])
    distinction = mark + rng.choice([20, 25, 30])
    middle = (mark + distinction) // 2
    best, second, worst = distinction + 6, distinction + 2, mark - 20
    rules = f'''PASS_MARK = {mark}
DISTINCTION_MARK = {distinction}


def reached(score, mark=PASS_MARK):
    return score >= mark


def best_attempts(scores, keep=2):
    return sorted(scores, reverse=True)[:keep]
'''
    report = f'''from {pkg}.rules import DISTINCTION_MARK, best_attempts, reached


def final_score(attempts):
    best = best_attempts(attempts)
    return sum(best) / len(best)


def outcome(attempts):
    score = final_score(attempts)
    if reached(score, DISTINCTION_MARK):
        return "distinction"
    if reached(score):
        return "pass"
    return "fail"


def class_list(students):
    return sorted(student["name"] for student in students if reached(final_score(student["attempts"])))
'''
    tests = f'''from {pkg}.report import class_list, final_score, outcome


def test_a_score_of_exactly_the_pass_mark_passes():
    assert outcome([{mark}, {mark}]) == "pass"


def test_a_score_between_the_marks_passes():
    assert outcome([{middle}, {middle}]) == "pass"


def test_the_best_two_of_three_attempts_count():
    assert final_score([{worst}, {best}, {second}]) == {(best + second) / 2}


def test_the_class_list_names_who_passed():
    students = [dict(id=7, name="Ada", attempts=[{best}, {second}]), dict(id=3, name="Bo", attempts=[{worst}, {worst}])]
    assert class_list(students) == ["Ada"]


def test_high_scores_earn_a_distinction():
    assert outcome([{best}, {second}]) == "distinction"
'''
    sites = {
        "mark": Site("wrong_comparison", "rules.py", "reached", "    return score >= mark", "    return score > mark",
                     ("test_a_score_of_exactly_the_pass_mark_passes",),
                     f"A student whose final score is exactly {mark}, the pass mark, is failed; the rules say a "
                     "score equal to the mark passes."),
        "default": Site("wrong_default", "rules.py", "reached", "def reached(score, mark=PASS_MARK):",
                        "def reached(score, mark=DISTINCTION_MARK):",
                        ("test_a_score_of_exactly_the_pass_mark_passes", "test_a_score_between_the_marks_passes"),
                        f"Students scoring {middle}, well above the pass mark of {mark} but short of a distinction, "
                        "are told they failed."),
        "best": Site("off_by_one", "rules.py", "best_attempts", "    return sorted(scores, reverse=True)[:keep]",
                     "    return sorted(scores, reverse=True)[:keep + 1]", ("test_the_best_two_of_three_attempts_count",),
                     f"With attempts of {worst}, {best} and {second}, the final score comes out as "
                     f"{round((worst + best + second) / 3, 2)}; only the best two attempts should count, giving "
                     f"{(best + second) / 2}."),
        "names": Site("wrong_key", "report.py", "class_list",
                      '    return sorted(student["name"] for student in students if reached(final_score(student["attempts"])))',
                      '    return sorted(student["id"] for student in students if reached(final_score(student["attempts"])))',
                      ("test_the_class_list_names_who_passed",),
                      "The list of students who passed shows numbers (7) where it should show their names (Ada)."),
    }
    return Project("grades", {"rules.py": rules, "report.py": report}, tests, "tests/test_report.py", sites)


def _paging(rng: random.Random, pkg: str) -> Project:
    size = rng.choice([5, 10, 20])
    largest = size * rng.choice([3, 4, 5])
    total = largest * 2 + rng.randint(1, size - 1)  # a last page partly filled at every size
    whole = size * rng.randint(2, 5)
    paging = f'''DEFAULT_PAGE_SIZE = {size}
MAX_PAGE_SIZE = {largest}


def page_bounds(number, size):
    start = (number - 1) * size
    return start, start + size


def page_total(count, size):
    return (count + size - 1) // size
'''
    listing = f'''from {pkg}.paging import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, page_bounds, page_total


def page(items, number, size=DEFAULT_PAGE_SIZE):
    start, end = page_bounds(number, min(size, MAX_PAGE_SIZE))
    return items[start:end]


def pages_needed(items, size=DEFAULT_PAGE_SIZE):
    return page_total(len(items), min(size, MAX_PAGE_SIZE))
'''
    tests = f'''from {pkg}.listing import page, pages_needed

ITEMS = list(range(100, {100 + total}))


def test_the_first_page_starts_at_the_first_item():
    assert page(ITEMS, 1, {size}) == ITEMS[:{size}]


def test_a_partly_filled_last_page_is_counted():
    assert pages_needed(ITEMS, {size}) == {-(-total // size)}


def test_the_page_count_uses_the_default_page_size():
    assert pages_needed(list(range({whole}))) == {whole // size}


def test_page_sizes_above_the_maximum_are_capped():
    assert len(page(ITEMS, 1, size=10**6)) == {largest}
'''
    sites = {
        "start": Site("off_by_one", "paging.py", "page_bounds", "    start = (number - 1) * size", "    start = number * size",
                      ("test_the_first_page_starts_at_the_first_item",),
                      f"Page 1 of the listing, {size} items a page, begins with item {100 + size} instead of item 100, "
                      "the first."),
        "count": Site("off_by_one", "paging.py", "page_total", "    return (count + size - 1) // size",
                      "    return count // size", ("test_a_partly_filled_last_page_is_counted",),
                      f"A listing of {total} items at {size} a page reports {total // size} pages; the last "
                      f"{total % size} {'items are' if total % size > 1 else 'item is'} on no page."),
        "default": Site("wrong_default", "listing.py", "pages_needed", "def pages_needed(items, size=DEFAULT_PAGE_SIZE):",
                        "def pages_needed(items, size=MAX_PAGE_SIZE):", ("test_the_page_count_uses_the_default_page_size",),
                        f"Asked how many pages {whole} items take without giving a page size, the listing says "
                        f"{-(-whole // largest)}; at the usual {size} items a page it should be {whole // size}."),
    }
    return Project("paging", {"paging.py": paging, "listing.py": listing}, tests, "tests/test_listing.py", sites)


def _thermostat(rng: random.Random, pkg: str) -> Project:
    low, high = rng.choice([10, 12, 15]), rng.choice([25, 28, 30])
    request = rng.choice([61, 64, 68, 70])  # 16.1 to 21.1 C: inside every range drawn, never its top
    wanted = round((request - 32) * 5 / 9, 1)
    times = sorted(rng.sample(range(0, 24), 3))
    cold, mild, warm = sorted(rng.sample(range(14, 24), 3))
    # by time of day: mild, warm, cold; so neither end of the day is the coldest-then-warmest pair
    by_time = [{"at": t, "celsius": c} for t, c in zip(times, (mild, warm, cold), strict=True)]
    readings = rng.sample(by_time, 3)
    convert = '''def clamp(value, low, high):
    return max(low, min(value, high))


def to_celsius(fahrenheit):
    return (fahrenheit - 32) * 5 / 9
'''
    thermostat = f'''from {pkg}.convert import clamp, to_celsius

MIN_SETPOINT = {low}
MAX_SETPOINT = {high}


def setpoint(requested_f):
    return round(clamp(to_celsius(requested_f), MIN_SETPOINT, MAX_SETPOINT), 1)


def readings_summary(readings):
    ordered = sorted(readings, key=lambda r: r["at"])
    return dict(first=ordered[0]["celsius"], last=ordered[-1]["celsius"])
'''
    tests = f'''from {pkg}.thermostat import readings_summary, setpoint


def test_a_request_within_range_is_kept():
    assert setpoint({request}) == {wanted}


def test_the_summary_follows_the_time_of_day():
    readings = {readings!r}
    assert readings_summary(readings) == dict(first={by_time[0]["celsius"]}, last={by_time[-1]["celsius"]})


def test_requests_above_the_range_are_capped():
    assert setpoint(200) == {high}
'''
    sites = {
        "clamp": Site("swapped_arguments", "thermostat.py", "setpoint",
                      "    return round(clamp(to_celsius(requested_f), MIN_SETPOINT, MAX_SETPOINT), 1)",
                      "    return round(clamp(to_celsius(requested_f), MAX_SETPOINT, MIN_SETPOINT), 1)",
                      ("test_a_request_within_range_is_kept",),
                      f"Whatever temperature is asked for, the thermostat is set to {high} C: asking for {request} F "
                      f"should set {wanted} C, which lies within the allowed {low} to {high} C."),
        "order": Site("wrong_key", "thermostat.py", "readings_summary",
                      '    ordered = sorted(readings, key=lambda r: r["at"])',
                      '    ordered = sorted(readings, key=lambda r: r["celsius"])',
                      ("test_the_summary_follows_the_time_of_day",),
                      f"The day's summary reports the coldest reading as the first and the warmest as the last; the "
                      f"first reading of the day (at {by_time[0]['at']}h) was {by_time[0]['celsius']} C."),
    }
    return Project("thermostat", {"convert.py": convert, "thermostat.py": thermostat}, tests,
                   "tests/test_thermostat.py", sites)


TEMPLATES: dict[str, Callable[[random.Random, str], Project]] = {
    "checkout": _checkout, "booking": _booking, "inventory": _inventory, "grades": _grades, "paging": _paging,
    "thermostat": _thermostat}


def _site_order() -> list[tuple[str, str]]:
    """Every (template, site), dealt round-robin over the bug kinds: the first five cover all five kinds."""
    probe = random.Random(0)
    by_kind: dict[str, list[tuple[str, str]]] = {kind: [] for kind in KINDS}
    for template, make in TEMPLATES.items():
        for key, site in make(probe, "pkg").sites.items():
            by_kind[site.kind].append((template, key))
    order = []
    while any(by_kind.values()):
        order += [by_kind[kind].pop(0) for kind in KINDS if by_kind[kind]]
    return order


SITES = _site_order()
