"""Splitting the launcher's byte stream into program output and nonce-tagged records (no I/O).

A record is ``\\x1e<nonce> <json>\\x1f`` (see launcher.py). Program output cannot forge one without the
nonce, so a line the program prints that looks like a pdb prompt is just output.
"""

from __future__ import annotations

import json
from typing import Literal, TypedDict, cast

from pdbgym.sandbox.output import BoundedOutput

RECORD_START = b"\x1e"
RECORD_END = b"\x1f"
# A record bigger than this is not ours (a breakpoint table is a few KB); treat it as output.
_MAX_RECORD_BYTES = 4 * 1024 * 1024


class BreakpointSpec(TypedDict):
    """A breakpoint as the session hands it to the launcher: ``file`` absolute, ``line`` 1-based."""

    file: str
    line: int
    condition: str | None
    enabled: bool
    temporary: bool
    funcname: str | None


class BreakpointEntry(BreakpointSpec):
    """A row of the launcher's breakpoint table: a spec and pdb's number for it."""

    number: int


class PromptRecord(TypedDict):
    """pdb waits for a command; the breakpoints it holds."""

    kind: Literal["prompt"]
    breakpoints: list[BreakpointEntry]


class EndedRecord(TypedDict):
    """The program ended: ``reason`` finished, quit, restart or exception; ``status`` pytest's exit status
    (a ``SystemExit`` code that is not an int as text; None after an exception)."""

    kind: Literal["ended"]
    reason: str
    status: int | str | None


class StaleRecord(TypedDict):
    """A spare process found project modules it had imported from elsewhere (at most 20 named)."""

    kind: Literal["stale"]
    modules: list[str]


# What the launcher (launcher.py) writes, nonce-tagged.
LauncherRecord = PromptRecord | EndedRecord | StaleRecord


class RecordScanner:
    """Feeds output bytes into a bounded buffer until a record arrives.

    ``feed`` returns the first complete record found, if any; bytes after it are kept for the next
    reply (output a thread printed after the prompt). ``take_output`` hands over the output so far.
    """

    def __init__(self, nonce: str, output_limit_bytes: int) -> None:
        self.opening = RECORD_START + nonce.encode() + b" "
        self.output_limit_bytes = output_limit_bytes
        self.output = BoundedOutput(output_limit_bytes)
        self.pending = bytearray()

    def feed(self, data: bytes) -> LauncherRecord | None:
        self.pending += data
        start = self.pending.find(self.opening)
        if start < 0:
            # Hold back a tail that could be the beginning of a record split across reads.
            keep = len(self.opening) - 1
            self._move_to_output(max(len(self.pending) - keep, 0))
            return None
        self._move_to_output(start)
        end = self.pending.find(RECORD_END, len(self.opening))
        if end < 0:
            if len(self.pending) > _MAX_RECORD_BYTES:
                self._move_to_output(len(self.opening))
            return None
        payload = bytes(self.pending[len(self.opening) : end])
        del self.pending[: end + 1]
        try:
            return cast(LauncherRecord, json.loads(payload))  # tagged with the nonce: the launcher wrote it
        except ValueError:
            self.output.feed(self.opening + payload + RECORD_END)
            return None

    def next_record(self) -> LauncherRecord | None:
        """A record already sitting in the held-back bytes, if any."""
        return self.feed(b"")

    def flush(self) -> None:
        """Move held-back bytes to the output (the stream ended)."""
        self._move_to_output(len(self.pending))

    def take_output(self) -> tuple[str, bool]:
        """(text, truncated) of the output since the last call; starts a fresh buffer."""
        text, truncated = self.output.text(), self.output.truncated
        self.output = BoundedOutput(self.output_limit_bytes)
        return text, truncated

    def _move_to_output(self, count: int) -> None:
        if count > 0:
            self.output.feed(bytes(self.pending[:count]))
            del self.pending[:count]
