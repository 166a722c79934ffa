"""What a GRPO run is built from besides the model, each checked before the model is wrapped: its train
and val tasks (disjoint, enough for a step) and the seed recipe's parts (the KL controller, the turn-budget
curriculum, BC anchor batches, the replay pool and the recipe state they start from)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdbgym.errors import PdbgymError
from pdbgym.tasks.model import Task
from pdbgym.tasks.suites import resolve_tasks
from pdbgym.train.grpo.config import ROLLOUT_WEIGHTS, GRPORunConfig
from pdbgym.train.grpo.data import AnchorBatches, ReplayPool, load_checked_corpus
from pdbgym.train.grpo.schedules import AdaptiveKLController, RecipeState, TurnBudgetCurriculum

if TYPE_CHECKING:  # annotations only: transformers loads with a tokenizer
    from transformers import PreTrainedTokenizerBase


def load_tasks(config: GRPORunConfig) -> tuple[list[Task], list[Task]]:
    """(train tasks, val tasks): disjoint, and at least ``tasks_per_step`` to train on."""
    train = resolve_tasks(config.tasks)
    val = resolve_tasks(config.val_tasks) if config.val_tasks else []
    shared = sorted({t.instance_id for t in train} & {t.instance_id for t in val})
    if shared:
        raise PdbgymError(f"{len(shared)} val task(s) are also training tasks ({', '.join(shared[:3])}); a gate on "
                          "tasks the policy trains on measures nothing. Give disjoint --tasks and --val-tasks")
    if len(train) < config.tasks_per_step:
        raise PdbgymError(f"--tasks-per-step {config.tasks_per_step} exceeds the {len(train)} training task(s)")
    return train, val


@dataclass
class RecipeParts:
    """The seed recipe's extensions of TRL for one run (``None``: that part is off)."""

    controller: AdaptiveKLController | None
    curriculum: TurnBudgetCurriculum
    anchor: AnchorBatches | None
    replay: ReplayPool | None
    state: RecipeState


def recipe_parts(config: GRPORunConfig, tokenizer: PreTrainedTokenizerBase, label: str) -> RecipeParts:
    """The parts from ``config``; anchor and replay corpora are checked against the policy's ``tokenizer``."""
    controller = AdaptiveKLController(config.beta, config.target_kl, config.kl_horizon_steps) \
        if config.kl_mode == "adaptive" else None
    if config.kl_mode not in ("adaptive", "fixed"):
        raise PdbgymError(f"--kl-mode {config.kl_mode!r}: choose adaptive or fixed")
    if config.rollout_weights not in ROLLOUT_WEIGHTS:
        raise PdbgymError(f"--rollout-weights {config.rollout_weights!r}: choose merged (a merged copy of the "
                          "policy, refreshed every step), merged-float32 (the same kept in float32) or live (the "
                          "PEFT model itself)")
    curriculum = TurnBudgetCurriculum(config.curriculum, config.budget_start, config.budget_end,
                                      config.budget_ramp_steps, config.budget_threshold, config.budget_increment)
    anchor = replay = None
    if config.anchor_data is not None and config.anchor_weight > 0:
        anchor = AnchorBatches(load_checked_corpus(config.anchor_data, tokenizer, label), config.anchor_batch,
                               config.anchor_max_tokens, tokenizer.pad_token_id)
    if config.replay_data is not None and config.replay_fraction > 0:
        replay = ReplayPool(load_checked_corpus(config.replay_data, tokenizer, label), config.max_context_tokens)
        if not replay.by_task:
            refused = ", ".join(f"{n} {reason}" for reason, n in sorted(replay.refused.items())) or "none"
            raise PdbgymError(f"--replay-data {config.replay_data} holds no trajectory to replay (refused: {refused}): "
                              "replay takes whole episodes that ended in a passing submit within "
                              f"--max-context-tokens {config.max_context_tokens}; give a corpus of solved "
                              "oracle episodes, or leave --replay-data out")
    state = RecipeState(beta=config.beta, budget_now=curriculum.budget(0))
    return RecipeParts(controller, curriculum, anchor, replay, state)
