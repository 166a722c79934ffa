"""The one lock on CUDA graph captures of the process, the device-wide sync that respects it, the engine's
named ranges in a profiler trace, and which attention kernels the process may take."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def cudnn_attention(allowed: bool) -> Iterator[None]:
    """Whether ``scaled_dot_product_attention`` may take cuDNN's kernels inside the block, the process's
    setting restored after it (torch's default: it may, and prefers them on Hopper). cuDNN builds and caches
    a graph per shape on the host; where shapes change every call (a GRPO step's length groups) that build is
    paid each time. Without cuDNN, attention falls to the flash or memory-efficient kernels, which need no
    build."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(allowed)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
