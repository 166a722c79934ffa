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


# Whether the engines' batches may take cuDNN's attention kernels: not by default (each prefill pass is a
# shape of its own, whose cuDNN graph is built on the host), and as ``cudnn_attention`` says inside it.
_ENGINES_CUDNN = [False]
_SERVING = threading.Lock()
_serving: list[bool] = []  # one entry a batch running on a GPU; the first holds the setting to put back


@contextlib.contextmanager
def cudnn_attention(allowed: bool) -> Iterator[None]:
    """Whether ``scaled_dot_product_attention`` may take cuDNN's kernels inside the block, the process's
    setting restored after it (torch's default: it may, and prefers them on Hopper), the engines' batches
    included. cuDNN builds and caches a graph per shape on the host; where shapes change every call (a GRPO
    step's length groups, every prefill pass) that build is paid each time. Without cuDNN, attention falls
    to the flash or memory-efficient kernels, which need no build."""
    before, engines = torch.backends.cuda.cudnn_sdp_enabled(), _ENGINES_CUDNN[0]
    torch.backends.cuda.enable_cudnn_sdp(allowed)
    _ENGINES_CUDNN[0] = allowed
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
        _ENGINES_CUDNN[0] = engines


@contextlib.contextmanager
def engine_attention() -> Iterator[None]:
    """Around an engine's batch on a GPU: attention off cuDNN while any engine's batch runs (unless inside
    ``cudnn_attention(True)``), the process's setting put back when the last one ends. A GRPO step's
    prefill pass cost 115-155 ms with cuDNN's graph builds and 36-47 ms without on an H100
    (docs/benchmarks.md).
    The switch is torch's, process-wide: engines on several threads share one count, so none puts it back
    while another still runs."""
    with _SERVING:
        if not _serving:
            _serving.append(torch.backends.cuda.cudnn_sdp_enabled())
            if not _ENGINES_CUDNN[0]:
                torch.backends.cuda.enable_cudnn_sdp(False)
        else:
            _serving.append(_serving[0])
    try:
        yield
    finally:
        with _SERVING:
            before = _serving.pop()
            if not _serving:
                torch.backends.cuda.enable_cudnn_sdp(before)
