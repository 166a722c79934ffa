"""The one lock on CUDA graph captures of the process, and the device-wide sync that respects it."""

from __future__ import annotations

import threading

import torch

# CUDA graph captures of every engine of the process, one at a time; the engines' device-wide syncs wait
# for a capture in another thread to end (a sync of a capturing stream would invalidate it).
CAPTURE = threading.RLock()


def synchronize() -> None:
    with CAPTURE:
        torch.cuda.synchronize()
