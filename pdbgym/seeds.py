"""The one per-episode seed: keyed by the task's id and the run's index, never by a task's position.

Every runner that seeds an episode (evaluation campaigns, ``pdbgym run`` and ``cache build`` with
``--seed``, DAgger's student play) takes its seed from ``episode_seed``, so the same task and run get
the same draw whatever else is in the task list, in whatever order, and on whichever worker.
"""

from __future__ import annotations

import zlib

SEED_MODULUS = 2**31


def episode_seed(base: int, instance_id: str, run: int) -> int:
    """The sampling seed of run ``run`` (0-based) of task ``instance_id`` under the base seed ``base``.

    ``(base * 1_000_003 + crc32(instance_id) * 101 + run) mod 2**31``: crc32 (not Python's ``hash``, which
    is salted per process) keeps it stable across processes and machines; the two odd multipliers keep
    neighbouring bases and neighbouring tasks from landing on the same seeds for small run counts.
    """
    return (base * 1_000_003 + zlib.crc32(instance_id.encode()) * 101 + run) % SEED_MODULUS
