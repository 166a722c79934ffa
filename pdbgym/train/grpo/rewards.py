"""GRPO rewards: outcome-dominated, each term a separate TRL reward function so each is logged apart.

Total reward of an episode (TRL sums ``weight_i * term_i``)::

    outcome  = 1.0 if final_test_passed (the hardened grader on pristine tests) else 0.0
               TAMPERED_REWARD (-1.0) when the termination reason is ``tampered``
    format   = share of assistant turns that parse as a tool call     (weight --format-weight, default 0)
    tampered = 1.0 for a tampered episode, else 0.0                    (weight 0: counted, never rewarded)

Shaped terms are 0.0 on tampered episodes, so a tampered episode always gets the lowest total reward
(``-1.0``) whatever the shaped weights (each capped at ``MAX_SHAPED_WEIGHT``). Nothing here reads the
debugger: using pdb is never rewarded, because rewarding it drove wrong-site fixation in the seed
recipe's runs (16 of 16 regression scenarios).
TRL calls each function as ``f(prompts=..., completions=..., completion_ids=..., **extra_columns)``
where the extra columns come from the rollout (``final_test_passed``, ``termination_reason``, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from pdbgym.errors import PdbgymError
from pdbgym.termination import TERMINATION_REASONS

TAMPERED = "tampered"
TAMPERED_REWARD = -1.0
MAX_SHAPED_WEIGHT = 0.2  # keeps the outcome dominant: a solve (1.0) always beats any shaped total

assert TAMPERED in TERMINATION_REASONS  # the reason's one owner is pdbgym.termination


class RewardColumns(TypedDict):
    """The episode facts the rollout hands TRL beside the ids, one entry per episode; TRL passes them to
    every reward function as keyword arguments (``trainer.rollout_output``)."""

    final_test_passed: list[bool]
    termination_reason: list[str]
    turns: list[int]
    valid_tool_call_rate: list[float]
    replayed: list[bool]


def _is_tampered(reason: str) -> bool:
    return str(reason) == TAMPERED


def outcome_reward(final_test_passed: list[bool], termination_reason: list[str], **_: object) -> list[float]:
    """1.0 for a graded solve, 0.0 otherwise, ``TAMPERED_REWARD`` for a tampered episode."""
    return [TAMPERED_REWARD if _is_tampered(reason) else (1.0 if bool(passed) else 0.0)
            for passed, reason in zip(final_test_passed, termination_reason, strict=True)]


def format_reward(valid_tool_call_rate: list[float], termination_reason: list[str], **_: object) -> list[float]:
    """Share of the episode's assistant turns that hold a well-formed tool call (0.0 if tampered)."""
    return [0.0 if _is_tampered(reason) else float(rate)
            for rate, reason in zip(valid_tool_call_rate, termination_reason, strict=True)]


def tampered_count(termination_reason: list[str], **_: object) -> list[float]:
    """1.0 per tampered episode: logged by TRL as ``rewards/tampered/mean`` with weight 0."""
    return [1.0 if _is_tampered(reason) else 0.0 for reason in termination_reason]


outcome_reward.__name__ = "outcome"
format_reward.__name__ = "format"
tampered_count.__name__ = "tampered"


@dataclass(frozen=True)
class RewardConfig:
    """Weights of the terms. ``format_weight`` in [0, MAX_SHAPED_WEIGHT]; the outcome weight is 1."""

    format_weight: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.format_weight <= MAX_SHAPED_WEIGHT:
            raise PdbgymError(f"--format-weight {self.format_weight} is outside [0, {MAX_SHAPED_WEIGHT}]: a larger "
                              "shaped term could outweigh solving the task")

    def functions(self) -> tuple[list[Callable[..., list[float]]], list[float]]:
        """The reward functions and weights to hand to ``GRPOTrainer`` / ``GRPOConfig.reward_weights``."""
        return [outcome_reward, format_reward, tampered_count], [1.0, self.format_weight, 0.0]

    def total(self, facts: RewardColumns) -> list[float]:
        """The weighted sum TRL computes, for reports and tests (same functions, same weights)."""
        functions, weights = self.functions()
        columns = [function(**facts) for function in functions]
        return [sum(w * column[i] for w, column in zip(weights, columns, strict=True))
                for i in range(len(columns[0]))]
