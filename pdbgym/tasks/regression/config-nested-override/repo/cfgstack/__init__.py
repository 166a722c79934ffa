"""Layered configuration: defaults, a site file and environment variables, merged into settings."""
