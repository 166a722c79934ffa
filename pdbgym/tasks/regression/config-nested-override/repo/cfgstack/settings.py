"""Typed server settings read from a merged configuration tree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class MissingSetting(KeyError):
    """A setting the server needs is absent from every layer."""


@dataclass(frozen=True)
class TlsSettings:
    cert: str
    key: str
    verify_clients: bool


@dataclass(frozen=True)
class ServerSettings:
    host: str
    port: int
    tls: TlsSettings | None


def _require(tree: dict, dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise MissingSetting(f"{dotted} is required; set it in the site file or as "
                                 f"APP__{dotted.upper().replace('.', '__')}")
        node = node[part]
    return node


def server_settings(config: dict) -> ServerSettings:
    """Server settings; TLS is on (and needs cert and key) unless ``server.tls.enabled`` is false."""
    tls = None
    if config.get("server", {}).get("tls", {}).get("enabled", True):
        tls = TlsSettings(
            cert=_require(config, "server.tls.cert"),
            key=_require(config, "server.tls.key"),
            verify_clients=bool(config["server"]["tls"].get("verify_clients", False)),
        )
    return ServerSettings(_require(config, "server.host"), int(_require(config, "server.port")), tls)
