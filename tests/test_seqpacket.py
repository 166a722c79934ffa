"""The fork server's messages over a real SOCK_SEQPACKET socket pair: descriptors travel, EOF and
packets that are not a JSON object are told apart."""

from __future__ import annotations

import os
import socket

from pdbgym.seqpacket import receive_message, send_message


def test_a_message_carries_its_descriptors_and_the_receiver_can_use_them():
    host, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_end, write_end = os.pipe()
    with host, server:
        send_message(host, {"op": "test"}, [write_end])
        os.close(write_end)  # the receiver holds its own copy
        message, fds = receive_message(server, 4)
        assert message == {"op": "test"} and len(fds) == 1
        os.write(fds[0], b"through the passed descriptor")
        os.close(fds[0])
        assert os.read(read_end, 100) == b"through the passed descriptor"
    os.close(read_end)


def test_a_closed_peer_and_a_packet_that_is_not_an_object_are_told_apart():
    host, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with server:
        host.send(b"[1, 2]")
        host.send(b"not json")
        assert receive_message(server, 4) == ({}, [])
        assert receive_message(server, 4) == ({}, [])
        host.close()
        assert receive_message(server, 4) == (None, [])
