"""Incremental line splitting for data that arrives in arbitrary chunks."""

from __future__ import annotations


class LineDecoder:
    """Feed bytes in; get complete lines (without the line ending) out.

    A line longer than ``max_line`` bytes is dropped whole: everything up to its newline is skipped,
    so one runaway sender cannot make the buffer grow without bound.
    """

    def __init__(self, max_line: int = 1024) -> None:
        if max_line < 1:
            raise ValueError("max_line must be >= 1")
        self.max_line = max_line
        self._buffer = bytearray()
        self._discarding = False  # inside an over-long line, skipping to its newline
        self.dropped_lines = 0

    def reset(self) -> None:
        """Forget partial input, e.g. when the connection drops mid-line and is re-established."""
        self._buffer.clear()

    def feed(self, chunk: bytes) -> list[bytes]:
        lines = []
        for piece in chunk.splitlines(keepends=True):
            complete = piece.endswith((b"\n", b"\r"))
            body = piece.rstrip(b"\r\n")
            if self._discarding:
                if complete:
                    self._discarding = False
                continue
            self._buffer += body
            if len(self._buffer) > self.max_line:
                self._buffer.clear()
                self.dropped_lines += 1
                self._discarding = not complete
                continue
            if complete:
                lines.append(bytes(self._buffer))
                self._buffer.clear()
        return [line for line in lines if line]
