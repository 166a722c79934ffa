"""The policy interface: turn observations into actions. Model policies also yield token ids."""

from __future__ import annotations

from typing import Protocol

from pdbgym.env.tools import Action
from pdbgym.tasks.model import Task


class Policy(Protocol):
    """A policy acts on one episode at a time: ``reset`` with the first observation, then act."""

    name: str

    def reset(self, task: Task, observation: str) -> None: ...

    def next_action(self, observation: str) -> Action: ...
