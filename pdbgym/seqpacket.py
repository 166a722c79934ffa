"""JSON messages with open file descriptors over a unix ``SOCK_SEQPACKET`` socket: the one reader and
writer of the pytest fork server's protocol, for both of its ends (the server in the sandbox,
``pdbgym.grading.server``, and its host, ``pdbgym.sandbox.zygote``).

One message is one packet: a JSON object, with descriptors passed alongside (``SCM_RIGHTS``). Standard
library only: the server imports this before it is warm, and every child it forks inherits it.
"""

from __future__ import annotations

import array
import json
import os
import socket
from collections.abc import Mapping, Sequence

MAX_MESSAGE = 1 << 20  # bytes of one message's JSON


def send_message(sock: socket.socket, message: Mapping[str, object], fds: Sequence[int] = (), flags: int = 0) -> None:
    """Send ``message`` with ``fds`` (the receiver gets its own copies; ours stay open). Raises ``OSError``."""
    data = json.dumps(message).encode()
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))], flags)
    else:
        sock.send(data, flags)


def receive_message(sock: socket.socket, max_fds: int) -> tuple[dict[str, object] | None, list[int]]:
    """One message and the descriptors it carried (at most ``max_fds``; the kernel closes any beyond).

    ``(None, [])`` when the peer has closed the socket (descriptors that came with an empty packet are
    closed); ``{}`` for a packet that is not a JSON object, so a caller answers it as no request at all. The
    message is the peer's: its values are checked by whoever reads them, so they are ``object`` here.
    Raises ``OSError`` as ``recvmsg`` does."""
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_LEN(max_fds * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    try:
        message = json.loads(data)
    except ValueError:
        message = {}
    return message if isinstance(message, dict) else {}, list(fds)
