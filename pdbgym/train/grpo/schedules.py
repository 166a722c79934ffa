"""The seed recipe's pieces for GRPO, each a pure formula plus the small state it keeps across steps.

- Adaptive reference-KL leash (Ziegler et al. 2019), on TRL's k3 estimate ``kl`` of KL(policy || ref)::

      e = clip(KL / target_kl - 1, -0.2, 0.2)
      beta <- beta * (1 + e / horizon_steps)

  Ziegler et al. write ``1 + e * n / horizon`` with n the sequences of a step and a horizon of 10,000
  sequences, made for steps of hundreds of sequences; at GRPO's 8 to 64 a step that moves beta by under
  0.2% a step, a leash that never pulls. The horizon here is counted in optimizer steps, so at most
  0.2 / horizon_steps a step (2% at the default 10) whatever the batch; ``pdbgym train grpo`` prints it.

  applied after every logged optimizer step by ``AdaptiveKLCallback`` (it sets ``trainer.beta``, which
  TRL reads at loss time).
- Turn-budget curriculum: the env's turn budget for the step's episodes.
  ``schedule``: budget(step) = start + floor((end - start) * min(1, step / ramp_steps)).
  ``solve_rate``: budget += increment (up to end) after a step whose batch solve rate >= threshold.
- Behaviour-cloning anchor weight: w(step) = w0 * max(0, 1 - step / decay_steps) (w0 forever when
  decay_steps == 0); the loss is ``rl_loss + w * nll(anchor batch)``.
- Replay seed fraction: f(step) = f0 * max(0, 1 - step / decay_steps); of a group of G episodes,
  replayed(step, G) = min(G - 1, floor(f * G + 0.5)) are solved corpus trajectories of the same task
  (at least one sample per group stays on-policy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from pdbgym.errors import PdbgymError

if TYPE_CHECKING:  # annotations only
    from trl import GRPOTrainer

KL_ERROR_CLIP = 0.2


@dataclass
class AdaptiveKLController:
    """Ziegler et al.'s proportional controller of the KL coefficient ``beta`` toward ``target_kl``."""

    beta: float = 0.04
    target_kl: float = 0.05  # nats per token (TRL's k3 mean over model tokens)
    horizon_steps: int = 10  # optimizer steps over which beta may change by a factor of about e^0.2

    def __post_init__(self) -> None:
        if self.beta <= 0 or self.target_kl <= 0 or self.horizon_steps <= 0:
            raise PdbgymError(f"the adaptive KL leash needs beta > 0, target_kl > 0 and horizon_steps > 0 (got "
                              f"beta={self.beta}, target_kl={self.target_kl}, horizon_steps={self.horizon_steps}); "
                              "pass --kl-mode fixed to train with a constant beta instead")

    @property
    def max_step_change(self) -> float:
        """The largest relative change of beta in one step (the clipped error over the horizon)."""
        return KL_ERROR_CLIP / self.horizon_steps

    def update(self, kl: float) -> float:
        """New beta after an optimizer step whose mean KL was ``kl``."""
        error = min(max(kl / self.target_kl - 1.0, -KL_ERROR_CLIP), KL_ERROR_CLIP)
        self.beta = self.beta * (1.0 + error / self.horizon_steps)
        return self.beta


@dataclass
class TurnBudgetCurriculum:
    """The turn budget episodes get, growing by schedule or by solve rate."""

    mode: str = "schedule"  # "schedule", "solve_rate" or "fixed"
    start: int = 10
    end: int = 30
    ramp_steps: int = 100  # schedule: steps to go from start to end
    threshold: float = 0.5  # solve_rate: grow once a step's solve rate reaches this
    increment: int = 2
    current: int = -1  # solve_rate mode: the budget now (-1: not started)

    def __post_init__(self) -> None:
        if self.mode not in ("schedule", "solve_rate", "fixed"):
            raise PdbgymError(f"--curriculum {self.mode!r}: choose schedule, solve_rate or fixed")
        if not 1 <= self.start <= self.end:
            raise PdbgymError(f"turn budget start {self.start} must be >= 1 and <= end {self.end}")
        if self.current < 0:
            self.current = self.start

    def budget(self, step: int) -> int:
        if self.mode == "fixed":
            return self.end
        if self.mode == "schedule":
            progress = min(1.0, step / self.ramp_steps) if self.ramp_steps > 0 else 1.0
            return self.start + math.floor((self.end - self.start) * progress)
        return self.current

    def observe(self, solve_rate: float) -> None:
        """Record a step's solve rate (solve_rate mode grows the budget)."""
        if self.mode == "solve_rate" and solve_rate >= self.threshold:
            self.current = min(self.end, self.current + self.increment)


def anchor_weight(step: int, initial: float, decay_steps: int) -> float:
    """Behaviour-cloning anchor weight at ``step``: linear decay from ``initial`` to 0 over ``decay_steps``."""
    if initial <= 0:
        return 0.0
    if decay_steps <= 0:
        return initial
    return initial * max(0.0, 1.0 - step / decay_steps)


def replay_fraction(step: int, initial: float, decay_steps: int) -> float:
    """Fraction of a group replaced by solved corpus trajectories at ``step`` (linear decay to 0;
    ``initial`` forever when ``decay_steps == 0``)."""
    if not 0.0 <= initial < 1.0:
        raise PdbgymError(f"--replay-fraction {initial} must be in [0, 1): a group needs on-policy samples")
    if initial == 0 or decay_steps <= 0:
        return initial
    return initial * max(0.0, 1.0 - step / decay_steps)


def replayed_per_group(step: int, group: int, groups: int, initial: float, decay_steps: int) -> list[int]:
    """How many of each group's ``group`` episodes are replayed at ``step``, for the step's ``groups`` groups.

    The step's share, ``replay_fraction * group * groups``, is rounded once for the whole step and spread
    evenly over its groups (never a whole group). Rounding each group on its own would lose any fraction
    below half an episode a group: 0.125 of G = 4 is 0.5, which rounds to 1 (twice the fraction) at the
    first step and to 0 from the next one on, so the decay never happened.
    """
    if group < 1 or groups < 1:
        return [0] * max(groups, 0)
    total = min(groups * (group - 1), math.floor(replay_fraction(step, initial, decay_steps) * group * groups + 0.5))
    return [total * (i + 1) // groups - total * i // groups for i in range(groups)]


class RecipeStateRow(TypedDict):
    """``pdbgym_recipe_state.json`` beside each checkpoint: a ``RecipeState``'s fields."""

    beta: float
    budget_now: int
    curriculum_current: int
    tampered_total: int
    refused_total: int
    episodes_total: int
    replayed_total: int
    replay_next: dict[str, int]


@dataclass
class RecipeState:
    """Everything of the recipe that must survive a resume (written beside each checkpoint)."""

    beta: float
    budget_now: int
    curriculum_current: int = -1  # the solve-rate curriculum's budget after the last step's observation
    tampered_total: int = 0
    refused_total: int = 0  # on-policy episodes whose grading refused the verdict, not tampered
    episodes_total: int = 0
    replayed_total: int = 0
    replay_next: dict[str, int] = field(default_factory=dict)  # the replay rotation: task -> next example


    def to_dict(self) -> RecipeStateRow:
        return {"beta": self.beta, "budget_now": self.budget_now, "curriculum_current": self.curriculum_current,
                "tampered_total": self.tampered_total, "refused_total": self.refused_total,
                "episodes_total": self.episodes_total, "replayed_total": self.replayed_total,
                "replay_next": dict(self.replay_next)}


class AdaptiveKLCallback(TrainerCallback):
    """Adapts ``trainer.beta`` from each logged step's ``kl`` (TRL logs the k3 mean as ``kl``).

    Needs ``logging_steps == 1`` so every optimizer step is seen once. With several processes the
    callback runs on each, and TRL's ``kl`` is the masked k3 sum and token count all-reduced over them
    (``global_masked_mean``), the same float everywhere: every process computes the same beta.
    """

    def __init__(self, trainer: GRPOTrainer, controller: AdaptiveKLController):
        self.trainer = trainer
        self.controller = controller

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: object) -> None:
        self.trainer.beta = self.controller.beta  # a resumed run restored controller.beta already

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, float] | None = None, **kwargs: object) -> None:
        kl = (logs or {}).get("kl")
        if kl is None or not math.isfinite(kl):
            return
        self.trainer.beta = self.controller.update(float(kl))
