"""A local mirror of CRM customers, filled from an export."""

from __future__ import annotations

from crmsync.export import ExportSnapshot
from crmsync.paging import page_offsets


class UnknownCustomer(KeyError):
    """A customer id that the mirror does not hold."""


class Mirror:
    def __init__(self) -> None:
        self.customers: dict[str, dict] = {}

    def pull(self, export: ExportSnapshot, page_size: int = 20) -> int:
        """Upsert every exported record (keyed by "id"); returns how many records were read."""
        read = 0
        for offset in page_offsets(export.count(), page_size):
            for record in export.page(offset, page_size):
                self.customers[record["id"]] = record
                read += 1
        return read

    def customer(self, customer_id: str) -> dict:
        if customer_id not in self.customers:
            raise UnknownCustomer(f"customer {customer_id!r} is not in the mirror ({len(self.customers)} held)")
        return self.customers[customer_id]
