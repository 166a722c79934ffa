"""A bounded head + tail buffer: a 1 GB output flood costs at most ``limit`` bytes of memory."""

from __future__ import annotations


class BoundedOutput:
    """Keeps the first ``limit // 2`` and the last ``limit - limit // 2`` bytes fed to it."""

    def __init__(self, limit: int) -> None:
        self.head_capacity = limit // 2
        self.tail_capacity = limit - self.head_capacity
        self.head = bytearray()
        self.tail = bytearray()
        self.bytes_total = 0

    def feed(self, data: bytes) -> None:
        """Add ``data``; bytes between the head and the tail are counted and dropped."""
        self.bytes_total += len(data)
        room = self.head_capacity - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        if len(data) >= self.tail_capacity:
            self.tail = bytearray(data[-self.tail_capacity :])
            return
        self.tail += data
        overflow = len(self.tail) - self.tail_capacity
        if overflow > 0:
            del self.tail[:overflow]

    @property
    def bytes_cut(self) -> int:
        return self.bytes_total - len(self.head) - len(self.tail)

    @property
    def truncated(self) -> bool:
        return self.bytes_cut > 0

    def text(self) -> str:
        """The kept bytes as text, with ``[... N bytes cut ...]`` where the middle was dropped."""
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + tail
        return f"{head}\n[... {self.bytes_cut} bytes cut ...]\n{tail}"
