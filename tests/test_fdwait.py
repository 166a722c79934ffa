"""Descriptors numbered 1024 and above: a process playing a hundred episodes at once holds that many.

``select.select`` refuses them (the GPU machine's held-out campaign lost a test run's reader to "filedescriptor
out of range in select()" at 160 episodes in play); every wait of the host side now polls instead. The
episode tests hold more than 1024 descriptors open first, so everything the episode opens (its pty, the fork
server's sockets and pidfds, the test run's channel) is numbered above the old limit.
"""

from __future__ import annotations

import os
import resource
import select
import socket
from collections.abc import Iterator

import pytest

from pdbgym.env import Action, DebugEnv, EnvConfig
from pdbgym.fdwait import raise_descriptor_limit, readable
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason

HIGH = 1500


@pytest.fixture
def many_descriptors() -> Iterator[None]:
    """Raise this process's descriptor limit, and fill every number below ``HIGH`` + 100."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"the hard descriptor limit is {hard}; the test needs 4096")
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))
    held = []
    try:
        while not held or held[-1] < HIGH + 100:
            held.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_select_refuses_a_high_descriptor_and_readable_does_not(many_descriptors):
    read_end, write_end = os.pipe()
    try:
        assert read_end > 1024
        with pytest.raises(ValueError, match="out of range"):
            select.select([read_end], [], [], 0)  # what the readers used to call
        assert readable([read_end], 0) == []
        os.write(write_end, b"x")
        assert readable([read_end], 0.5) == [read_end]
    finally:
        os.close(read_end)
        os.close(write_end)


def test_readable_keeps_the_order_and_objects_given_and_reports_a_closed_peer(many_descriptors):
    left, right = socket.socketpair()
    quiet_read, quiet_write = os.pipe()
    try:
        right.sendall(b"x")
        assert readable([quiet_read, left], 0.5) == [left]
        right.close()
        left.recv(1)
        assert readable([left, quiet_read], 0.5) == [left]  # EOF reads as ready, as select reports it
        assert readable([quiet_read], 0.01) == []
    finally:
        left.close()
        for fd in (quiet_read, quiet_write):
            os.close(fd)


@pytest.mark.parametrize("backend", [
    pytest.param("bwrap", marks=pytest.mark.skipif(bwrap_unavailable_reason() is not None,
                                                   reason=str(bwrap_unavailable_reason()))),
    "plain",
])
def test_an_episode_with_every_descriptor_above_1024_is_solved(many_descriptors, tiny_task, backend):
    """The pdb session's pty, the test run's channel and (under bwrap) the fork server's sockets all open
    above 1024: the episode plays, runs the tests and is graded as with few descriptors."""
    with DebugEnv(tiny_task, EnvConfig(sandbox=backend)) as env:
        env.reset()
        observation, _, _ = env.step(Action("pdb", {"command": "p 6 * 7"}))
        assert "42" in observation
        env.step(Action("edit", {"path": "calc/ops.py", "start": 6, "end": 6, "new_text": "    return a - b\n"}))
        observation, _, _ = env.step(Action("run_tests"))
        assert "passed" in observation, observation
        _, done, info = env.step(Action("submit"))
    assert done and info["final_test_passed"], env.result


def test_the_soft_descriptor_limit_is_raised_within_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard descriptor limit is {hard}; the test needs 2048")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        assert raise_descriptor_limit(100) == 256  # never lowered
        assert raise_descriptor_limit(2000) == 2000
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (2000, hard)
        if hard != resource.RLIM_INFINITY:
            assert raise_descriptor_limit(hard + 10) == hard  # as far as the hard limit allows, no error
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
