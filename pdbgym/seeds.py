"""The one per-episode seed: keyed by the task's id and the run's index, never by a task's position.

Every runner that seeds an episode (evaluation campaigns, ``pdbgym run`` and ``cache build`` with
``--seed``, DAgger's student play, GRPO's groups and val gates) takes its seed from ``episode_seed``, so
the same task and run get the same draw whatever else is in the task list, in whatever order, and on
whichever worker. GRPO's "run" of an episode is its place in the training run (``grpo_run_index``).
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


def grpo_run_index(step: int, group: int, slot: int, group_size: int, groups_per_step: int) -> int:
    """The run index of a GRPO training episode: slot ``slot`` (0-based, < ``group_size``) of group ``group``
    (0-based over all processes, < ``groups_per_step``) of optimizer step ``step`` (0-based).

    ``(step * groups_per_step + group) * group_size + slot``: distinct for every episode of a run, so two
    groups of one task (in one step, on two processes, or in two steps) never draw alike; a replayed slot
    keeps its index unused, so the played slots' seeds do not shift with the replay fraction.
    """
    if not (0 <= slot < group_size and 0 <= group < groups_per_step and step >= 0):
        raise ValueError(f"GRPO episode ({step=}, {group=}, {slot=}) lies outside a step of {groups_per_step} "
                         f"group(s) of {group_size}")
    return (step * groups_per_step + group) * group_size + slot


def grpo_episode_seed(base: int, instance_id: str, step: int, group: int, slot: int, group_size: int,
                      groups_per_step: int) -> int:
    """The seed of a GRPO training episode: ``episode_seed(base, instance_id, grpo_run_index(...))``."""
    return episode_seed(base, instance_id, grpo_run_index(step, group, slot, group_size, groups_per_step))


def turn_seed(episode: int, position: int) -> int:
    """The seed of one model turn: the episode's seed and where the turn starts (its prompt's length).

    Each turn of an episode then draws afresh (with the episode's seed alone, every turn would replay
    the same random numbers: the same first ids whenever the distributions are alike), and a rerun of
    the episode draws the same turns. ``crc32`` of both, mod 2**31."""
    return zlib.crc32(f"{episode}:{position}".encode()) % SEED_MODULUS

