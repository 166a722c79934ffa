"""Reward spread of GRPO steps, counted from the episodes the policy played (``outcomes.jsonl``).

GRPO learns from a group only when its episodes' rewards differ. TRL's ``frac_reward_zero_std`` counts
every episode of a group, replayed corpus trajectories (reward 1 by construction) included: a group whose
played episodes all failed beside one replayed success has spread, yet the policy's own samples taught
nothing about which of its choices were better. So spread is counted twice here:

- ``on_policy``: groups whose on-policy episodes' outcome rewards differ (the policy's own signal);
- ``replay_only``: groups with spread only because a replayed episode scored apart from the played ones.

The outcome reward is 1 solved, 0 not, -1 tampered (``rewards.py``): at the default ``--format-weight 0``
it is the whole reward; a shaped format term can add spread that this count does not see.
"""

from __future__ import annotations

from typing import TypedDict

from pdbgym.train.grpo.records import EpisodeOutcomeRow, StepOutcomes


class GroupSpread(TypedDict):
    """One step's groups: how many, how many had on-policy spread, how many spread from replay only."""

    groups: int
    on_policy: int
    replay_only: int


class StepsSpread(TypedDict):
    """A run's steps: how many were logged, how many had on-policy spread, how many spread from replay only."""

    steps: int
    on_policy: int
    replay_only: int


def outcome_reward(episode: EpisodeOutcomeRow) -> int:
    """An ``outcomes.jsonl`` episode's outcome reward: -1 tampered, 1 solved, 0 otherwise."""
    return -1 if episode.get("reason") == "tampered" else int(bool(episode.get("solved")))


def step_spread(row: StepOutcomes) -> GroupSpread:
    """One ``outcomes.jsonl`` row's groups (a step deals each task once, so a task's episodes are its
    group): how many, how many had on-policy spread, how many had spread from replayed episodes only."""
    groups: dict[str, list[EpisodeOutcomeRow]] = {}
    for episode in row.get("episodes", []):
        groups.setdefault(episode["task"], []).append(episode)
    on_policy = replay_only = 0
    for episodes in groups.values():
        played = {outcome_reward(e) for e in episodes if not e.get("replayed")}
        every = {outcome_reward(e) for e in episodes}
        on_policy += len(played) > 1
        replay_only += len(played) <= 1 and len(every) > 1
    return {"groups": len(groups), "on_policy": on_policy, "replay_only": replay_only}


def spread_steps(outcomes: list[StepOutcomes]) -> StepsSpread:
    """Over a run's ``outcomes.jsonl`` rows: the steps logged, the steps with on-policy spread in any group,
    and the steps whose only spread came from replayed episodes."""
    per_step = [step_spread(row) for row in outcomes]
    return {"steps": len(per_step), "on_policy": sum(1 for s in per_step if s["on_policy"]),
            "replay_only": sum(1 for s in per_step if s["replay_only"] and not s["on_policy"])}
