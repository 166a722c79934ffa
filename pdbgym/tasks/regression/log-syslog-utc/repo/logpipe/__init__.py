"""Log ingestion: parse JSON and syslog lines, bucket events into time windows, raise alerts."""
