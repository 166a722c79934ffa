"""A small text template engine: {{ var | filter }}, {% for %}, {% if %}."""
