"""The action-policy interface: turn observations into actions (scripted, human).

The episode loop consumes an action policy through ``pdbgym.agent.turns.ActionPolicyTurns``, the same
``TurnSource`` seam a model backend uses.
"""

from __future__ import annotations

from typing import Protocol

from pdbgym.env.tools import Action
from pdbgym.tasks.model import Task


class Policy(Protocol):
    """A policy acts on one episode at a time: ``reset`` with the first observation, then act."""

    name: str  # what transcripts and records call it

    def reset(self, task: Task, observation: str) -> None: ...

    def next_action(self, observation: str) -> Action: ...
