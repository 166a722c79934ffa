"""Typed settings and the values derived from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Settings:
    host: str
    port: int
    workers: int
    timeout_s: float
    log_level: str
    log_json: bool
    metrics: bool

    @classmethod
    def from_flat(cls, values: dict[str, Any]) -> Settings:
        return cls(
            host=values["server.host"],
            port=values["server.port"],
            workers=values["server.workers"],
            timeout_s=values["server.timeout_s"],
            log_level=values["log.level"].upper(),
            log_json=values["log.json"],
            metrics=values["features.metrics"],
        )

    def worker_ports(self) -> list[int]:
        """Each worker listens on its own port, counting up from the configured one."""
        return [self.port + index for index in range(self.workers)]

    def bind_addresses(self) -> list[str]:
        return [f"{self.host}:{port}" for port in self.worker_ports()]

    def handlers(self) -> list[str]:
        handlers = ["json-stdout" if self.log_json else "text-stdout"]
        if self.metrics:
            handlers.append("prometheus")
        return handlers
