"""JSON payloads for the shop's order API."""
