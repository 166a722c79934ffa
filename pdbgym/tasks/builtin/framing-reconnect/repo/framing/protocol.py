"""The telemetry protocol: one command per line, ``VERB arg=value ...``."""

from __future__ import annotations

from dataclasses import dataclass, field

from framing.decoder import LineDecoder

VERBS = frozenset({"HELLO", "METRIC", "EVENT", "BYE"})


class ProtocolError(ValueError):
    """A line is not a valid command."""


@dataclass(frozen=True)
class Command:
    verb: str
    args: dict[str, str] = field(default_factory=dict)


def parse_command(line: bytes) -> Command:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"line is not UTF-8: {line[:40]!r}") from None
    verb, *pairs = text.split()
    if verb not in VERBS:
        raise ProtocolError(f"unknown verb {verb!r}; expected one of {', '.join(sorted(VERBS))}")
    args = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ProtocolError(f"argument {pair!r} is not key=value")
        args[key] = value
    return Command(verb, args)


class Session:
    """One client across reconnects: collects commands, counts errors."""

    def __init__(self, max_line: int = 1024) -> None:
        self.decoder = LineDecoder(max_line)
        self.commands: list[Command] = []
        self.errors: list[str] = []

    def received(self, chunk: bytes) -> None:
        for line in self.decoder.feed(chunk):
            try:
                self.commands.append(parse_command(line))
            except ProtocolError as exc:
                self.errors.append(str(exc))

    def reconnected(self) -> None:
        # Whatever was in flight when the connection broke is lost; start from a clean line.
        self.decoder.reset()
