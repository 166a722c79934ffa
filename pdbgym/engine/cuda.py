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


# Torch's cuDNN-attention switch is one flag of the process, and both the runs' blocks (``cudnn_attention``)
# and the engines' batches (``engine_attention``, on threads of their own) want it set while they last,
# beginning and ending in any order. So they share one record: the blocks in force, each with what it
# asks (a run: its setting; an engine batch: None, "whatever the latest run asks, else off"), and the
# process's own setting, taken when the first began and put back when the last ends.
_SWITCH = threading.Lock()
_blocks: list[tuple[object, bool | None]] = []
_before: list[bool] = []


def _enter(asked: bool | None) -> object:
    token = object()
    with _SWITCH:
        if not _blocks:
            _before[:] = [torch.backends.cuda.cudnn_sdp_enabled()]
        _blocks.append((token, asked))
        runs = [value for _, value in _blocks if value is not None]
        torch.backends.cuda.enable_cudnn_sdp(runs[-1] if runs else False)
    return token


def _leave(token: object) -> None:
    with _SWITCH:
        _blocks[:] = [block for block in _blocks if block[0] is not token]
        runs = [value for _, value in _blocks if value is not None]
        torch.backends.cuda.enable_cudnn_sdp(runs[-1] if runs else False if _blocks else _before[0])


@contextlib.contextmanager
def cudnn_attention(allowed: bool) -> Iterator[None]:
    """Whether ``scaled_dot_product_attention`` may take cuDNN's kernels inside the block, the process's
    setting restored after it (torch's default: it may, and prefers them on Hopper), the engines' batches
    included. cuDNN builds and caches a graph per shape on the host; where shapes change every call (a GRPO
    step's length groups, every prefill pass) that build is paid each time. Without cuDNN, attention falls
    to the flash or memory-efficient kernels, which need no build."""
    token = _enter(allowed)
    try:
        yield
    finally:
        _leave(token)


@contextlib.contextmanager
def engine_attention() -> Iterator[None]:
    """Around an engine's batch on a GPU: attention off cuDNN while any engine's batch runs (unless a
    ``cudnn_attention(True)`` block is in force), the process's setting put back when the last block of
    either kind ends. A GRPO step's prefill pass cost 115-155 ms with cuDNN's graph builds and 36-47 ms
    without on an H100 (docs/benchmarks.md)."""
    token = _enter(None)
    try:
        yield
    finally:
        _leave(token)
