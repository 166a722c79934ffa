"""Shared-cost invoices: split across cost centres and post as balanced double-entry journals."""
