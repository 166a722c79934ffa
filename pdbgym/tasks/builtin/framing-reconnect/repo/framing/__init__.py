"""framing: split a byte stream into lines and parse telemetry commands from them."""

from framing.decoder import LineDecoder
from framing.protocol import Command, ProtocolError, Session

__all__ = ["Command", "LineDecoder", "ProtocolError", "Session"]
