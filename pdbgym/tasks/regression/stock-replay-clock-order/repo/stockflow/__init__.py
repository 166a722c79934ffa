"""Warehouse stock levels rebuilt by replaying the day's movement log."""
