"""Parsers for the two log sources. Each returns Events with timezone-aware timestamps."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Event:
    timestamp: datetime
    service: str
    level: str  # lower-case: debug, info, warning, error
    message: str


class LogFormatError(ValueError):
    """A line that its source's parser cannot read."""


_LEVEL_ALIASES = {"warn": "warning", "err": "error", "crit": "error", "notice": "info"}
# RFC 5424 severities 0-7 from the PRI field (PRI = facility * 8 + severity).
_SYSLOG_SEVERITY = ["error", "error", "error", "error", "warning", "info", "info", "debug"]
_SYSLOG = re.compile(r"<(\d{1,3})>1 (\S+) (\S+) (\S+) \S+ \S+ \S+ ?(.*)")


def _level(raw: str) -> str:
    level = raw.strip().lower()
    return _LEVEL_ALIASES.get(level, level)


def parse_json_line(line: str) -> Event:
    """An application log line: {"ts": ISO-8601, "service": ..., "level": ..., "msg": ...}.

    The timestamp is kept exactly as written; a stamp without an offset stays naive, and the
    windowing step decides what to do with it.
    """
    try:
        record = json.loads(line)
        return Event(datetime.fromisoformat(record["ts"]), record["service"], _level(record["level"]),
                     record.get("msg", ""))
    except (ValueError, KeyError, TypeError) as exc:
        raise LogFormatError(f"bad JSON log line {line[:80]!r}: {exc}") from exc


def _syslog_timestamp(stamp: str) -> datetime:
    # RFC 5424 stamps end in 'Z' or carry an offset; older fromisoformat rejected the 'Z'.
    if stamp.endswith("Z"):
        stamp = stamp[:-1]
    return datetime.fromisoformat(stamp)


def parse_syslog_line(line: str) -> Event:
    """An RFC 5424 line: '<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD MSG'; the app is the service."""
    match = _SYSLOG.fullmatch(line.strip())
    if not match:
        raise LogFormatError(f"not an RFC 5424 syslog line: {line[:80]!r}")
    pri, stamp, _host, app, message = match.groups()
    try:
        timestamp = _syslog_timestamp(stamp)
    except ValueError as exc:
        raise LogFormatError(f"bad syslog timestamp {stamp!r}") from exc
    return Event(timestamp, app, _SYSLOG_SEVERITY[int(pri) % 8], message)
