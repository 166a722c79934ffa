"""Warehouse stock and delivery distances."""

from __future__ import annotations

# Days from each warehouse to each delivery zone.
TRANSIT_DAYS = {
    "leeds": {"north": 1, "south": 2, "wales": 2},
    "bristol": {"north": 2, "south": 1, "wales": 1},
    "dover": {"north": 3, "south": 1, "wales": 3},
}


def warehouses_by_distance(zone: str) -> list[str]:
    """Warehouses nearest-first for a zone; ties broken by name."""
    if zone not in TRANSIT_DAYS["leeds"]:
        raise ValueError(f"unknown delivery zone {zone!r}")
    return sorted(TRANSIT_DAYS, key=lambda warehouse: (TRANSIT_DAYS[warehouse][zone], warehouse))
