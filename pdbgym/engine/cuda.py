"""The one lock on CUDA graph captures of the process, the device-wide sync that respects it, and the
engine's named ranges in a profiler trace."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import torch

P = ParamSpec("P")
R = TypeVar("R")

# CUDA graph captures of every engine of the process, one at a time; the engines' device-wide syncs wait
# for a capture in another thread to end (a sync of a capturing stream would invalidate it).
CAPTURE = threading.RLock()


def synchronize() -> None:
    with CAPTURE:
        torch.cuda.synchronize()


def traced(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A method's calls as ``pdbgym/engine/<name>`` ranges in a ``torch.profiler`` trace (``train grpo
    --trace-step``); a fresh range each call, so threads do not share one. Off a trace it costs a few
    microseconds a call."""
    def wrap(method: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(method)
        def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            with torch.profiler.record_function(f"pdbgym/engine/{name}"):
                return method(*args, **kwargs)
        return inner
    return wrap
