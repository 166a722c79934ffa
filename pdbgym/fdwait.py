"""Wait for descriptors to become readable, whatever their number.

``select.select`` refuses any descriptor at or above ``FD_SETSIZE`` (1024) with ``ValueError``. A process
that plays a hundred episodes at once holds more than that (each episode's pty, pipes, sockets and
pidfds), so a reader that selected on a descriptor numbered 1024 or more died on the GPU machine with
"filedescriptor out of range in select()". ``poll`` has no such limit. Stdlib only: the sandbox's
launchers may import it.
"""

from __future__ import annotations

import math
import resource
import select
from collections.abc import Iterable
from typing import Protocol, TypeVar


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


Waitable = TypeVar("Waitable", bound=int | _HasFileno)

# A hang-up, an error or a closed descriptor counts as readable, as select reports them: the read that
# follows returns EOF or raises, which is how every caller learns the other end is gone.
_READY = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR | select.POLLNVAL


def readable(items: Iterable[Waitable], timeout_s: float | None) -> list[Waitable]:
    """The members of ``items`` (descriptors, or objects with ``fileno()``) that are readable within
    ``timeout_s`` seconds (None: wait until one is), in the order given; [] when none is in time."""
    poller = select.poll()
    order: list[tuple[int, Waitable]] = []
    for item in items:
        fd = item if isinstance(item, int) else item.fileno()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        order.append((fd, item))
    timeout_ms = None if timeout_s is None else max(0, math.ceil(timeout_s * 1000))
    ready = {fd for fd, events in poller.poll(timeout_ms) if events & _READY}
    return [item for fd, item in order if fd in ready]


def raise_descriptor_limit(wanted: int) -> int:
    """Raise this process's soft limit of open descriptors to at least ``wanted``, as far as the hard limit
    allows (a shell's default soft limit is often 1024, about what 50 episodes at once hold); return the
    soft limit in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return soft
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return max(soft, target)
