"""Import bank statements (CSV) into a ledger of integer cents."""
