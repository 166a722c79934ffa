"""The config of ``pdbgym train grpo``: every field but ``extra`` is a flag of the same name."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pdbgym.episode_defaults import (
    EPISODE,
    GRPO_MAX_CONTEXT_TOKENS,
    GRPO_TEMPERATURE,
    EpisodeSettings,
    SettingsError,
    check_setting,
)

ROLLOUT_WEIGHTS = ("merged", "merged-float32", "live")  # what GRPO's rollouts decode from (trainer.py)


@dataclass
class GRPORunConfig:
    """``pdbgym train grpo``: formulas of the recipe terms in ``schedules.py``.

    Every field is a flag of the same name whose default is read from here, except ``use_dora`` (the
    flag is ``--lora``, its negation) and ``extra`` (further ``GRPOConfig`` fields; library callers
    only). Episode settings default to ``pdbgym.episode_defaults``: ``max_new_tokens`` and
    ``budget_end`` (the turn budget the curriculum ends at, and val gates play) to ``EPISODE``'s;
    ``temperature`` and ``max_context_tokens`` to the named GRPO exceptions there (``GRPO_TEMPERATURE``,
    ``GRPO_MAX_CONTEXT_TOKENS``, with their reasons). Each episode's draw is seeded by
    ``pdbgym.seeds.grpo_episode_seed`` from ``seed``.
    """

    policy: str  # adapter-store reference of the SFT adapter, a model folder, or "embedded"
    tasks: str  # suite, task id or folder: the training tasks
    out: Path
    group: int = 8  # G episodes per task per step (TRL num_generations)
    tasks_per_step: int = 1  # groups per optimizer step
    steps: int = 100  # optimizer steps
    seed: int = 42
    lr: float = 1e-5
    rank: int = 16
    alpha: int = 32
    use_dora: bool = True
    temperature: float = GRPO_TEMPERATURE
    max_new_tokens: int = EPISODE.max_new_tokens  # per turn
    max_context_tokens: int = GRPO_MAX_CONTEXT_TOKENS  # per episode (prompt + response)
    command_timeout_s: float = 10.0
    kl_mode: str = "adaptive"  # adaptive | fixed
    beta: float = 0.04  # initial (or fixed) KL coefficient
    target_kl: float = 0.05
    kl_horizon_steps: int = 10  # adaptive leash: beta moves at most 0.2 / this a step
    curriculum: str = "schedule"  # schedule | solve_rate | fixed
    budget_start: int = 10
    budget_end: int = EPISODE.turn_budget
    budget_ramp_steps: int = 100
    budget_threshold: float = 0.5
    budget_increment: int = 2
    anchor_data: Path | None = None  # SFT corpus folder for the BC anchor
    anchor_weight: float = 0.1
    anchor_decay_steps: int = 0
    anchor_batch: int = 1
    anchor_max_tokens: int = 4096
    replay_data: Path | None = None  # SFT corpus folder; its solved examples seed early groups
    replay_fraction: float = 0.25
    replay_decay_steps: int = 20
    format_weight: float = 0.0
    loss_type: str = "dapo"  # TRL's loss_type
    importance_sampling_level: str = "token"  # TRL: token | sequence
    num_iterations: int = 1  # TRL: optimizer passes per generated batch (> 1 makes samples stale)
    epsilon: float = 0.2  # TRL clip range
    save_steps: int = 10
    rollout_weights: str = "merged"  # merged: decode from a merged copy (merged.py); merged-float32; live
    update_tokens: int = 65536  # padded ids a forward of the update holds at most (packing.py); 0: TRL's one batch
    max_minutes: float = 0.0  # wall-clock cap of this invocation's training (0: none); a last checkpoint is saved and gated
    pause_after_minutes: float = 0.0  # stop this invocation at a gated checkpoint, unchosen and unregistered, for --resume
    val_tasks: str | None = None
    val_runs: int = 4
    val_k: int = 3
    store: Path | None = None
    ledger: Path | None = None
    name: str | None = None  # store name of the result (default: grpo-<out folder name>)
    device: str = "auto"
    resume: bool = False
    tensorboard: bool = False
    register_without_signal: bool = False  # register the delta even when no step had reward spread
    extra: dict[str, Any] = field(default_factory=dict)  # further GRPOConfig fields, as given

    def __post_init__(self) -> None:
        # The episode settings by EpisodeSettings' rules: the curriculum's ends as turn budgets, the rest as
        # an episode at the curriculum's end (where val gates play) checks them.
        check_setting("budget_start", self.budget_start, rule="turn_budget")
        check_setting("budget_end", self.budget_end, rule="turn_budget")
        check_setting("val_runs", self.val_runs, rule="runs")
        if isinstance(self.update_tokens, bool) or not isinstance(self.update_tokens, int) or self.update_tokens < 0:
            raise SettingsError(f"update_tokens must be a whole number of ids >= 0 (0: one padded batch), got "
                                f"{self.update_tokens!r}")
        EpisodeSettings(max_context_tokens=self.max_context_tokens, turn_budget=self.budget_end,
                        temperature=self.temperature, max_new_tokens=self.max_new_tokens)

    def recipe(self) -> dict[str, Any]:
        skip = {"out", "store", "ledger", "extra", "resume", "device", "name", "register_without_signal",
                "rollout_weights", "update_tokens", "pause_after_minutes", "max_minutes"}  # how a run stops is no setting of its result
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items() if k not in skip}
