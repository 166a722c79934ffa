"""Where a GRPO step's seconds go, beside TRL's own ``step_time``, logged with every step.

TRL's ``training_step`` holds the rollouts (``_prepare_inputs``: the episodes, then scoring: the
reference forward and the rewards), the loss (the policy forward, plus the BC anchor's) and the
backward; the optimizer step comes after it. The trainer times each part through ``UpdateClock`` (its
overrides are thin wrappers of TRL's methods), and ``OptimizerClock`` times the optimizer step between
the callback events around it. On a GPU each part ends with a device sync, so its seconds are the
kernels', not their launch.

Logged per step (seconds): ``time/prepare_s`` (rollouts and scoring), ``time/update/reference_s``
(forwards without gradient: the reference model's log-probs), ``time/update/policy_forward_s``,
``time/update/anchor_s``, ``time/update/backward_s``, ``time/update/optimizer_s``, and
``time/update/other_scoring_s`` (what ``_prepare_inputs`` spent beyond the rollouts and the reference:
rewards, advantages, padding).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: transformers loads with the trainer
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments


def _sync() -> None:
    import torch  # optional: torch (pdbgym[hf])

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class UpdateClock:
    """Seconds of each part of the step in progress (prepare, reference, policy_forward, anchor, loss,
    train_step, optimizer), summed over its calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def timed(self, part: str) -> Iterator[None]:
        from torch.profiler import record_function  # optional: torch (pdbgym[hf]); a named range in a trace

        started = time.perf_counter()
        try:
            with record_function(f"pdbgym/{part}"):
                yield
        finally:
            _sync()
            self.seconds[part] = self.seconds.get(part, 0.0) + time.perf_counter() - started

    def drain(self, rollout_s: float) -> dict[str, float]:
        """This step's metrics (see the module docstring), the clock reset; ``rollout_s`` is the step's
        ``time/rollout_s`` (its episodes), to tell the scoring's remainder apart."""
        s, self.seconds = self.seconds, {}
        if not s:
            return {}
        loss = s.get("loss", 0.0)
        out = {"time/prepare_s": s.get("prepare", 0.0),
               "time/update/reference_s": s.get("reference", 0.0),
               "time/update/policy_forward_s": s.get("policy_forward", 0.0),
               "time/update/anchor_s": s.get("anchor", 0.0),
               "time/update/backward_s": max(0.0, s.get("train_step", 0.0) - s.get("prepare", 0.0) - loss),
               "time/update/optimizer_s": s.get("optimizer", 0.0),
               "time/update/other_scoring_s": max(0.0, s.get("prepare", 0.0) - rollout_s - s.get("reference", 0.0))}
        return {key: round(value, 4) for key, value in out.items()}


def optimizer_clock(clock: UpdateClock) -> TrainerCallback:
    """A ``TrainerCallback`` adding the optimizer step's seconds (between ``on_pre_optimizer_step`` and
    ``on_optimizer_step``) to ``clock``."""
    from transformers import TrainerCallback  # optional: transformers (pdbgym[hf])

    class OptimizerClock(TrainerCallback):
        started = 0.0

        def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                                  **kwargs: object) -> None:
            _sync()
            self.started = time.perf_counter()

        def on_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                              **kwargs: object) -> None:
            _sync()
            clock.seconds["optimizer"] = clock.seconds.get("optimizer", 0.0) + time.perf_counter() - self.started

    return OptimizerClock()
