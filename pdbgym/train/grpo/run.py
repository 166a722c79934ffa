"""``train_grpo``: build the run (``grpo.build``); train (or resume); choose, register (``grpo.choose``).

Output folder::

    checkpoints/checkpoint-N/   TRL checkpoints (adapter, optimizer, RNG, trainer state, recipe state)
    steps.jsonl                 one line per optimizer step: reward terms, KL, beta, turn budget, BC terms
    outcomes.jsonl              one line per optimizer step: each episode's task, outcome, replayed or not
    gates.jsonl                 val pass@1 / pass@k (CIs over tasks) of every checkpoint
    adapter/                    the chosen delta (PEFT DoRA folder), registered with its parent
    grpo_run.json               recipe, parent, chosen checkpoint, store id
    ranks/rank-R.jsonl          several processes: each one's view of every step (its episodes, budget, counters)
    tensorboard/                TensorBoard event files (with --tensorboard)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import cast

from pdbgym.engine.cuda import cudnn_attention
from pdbgym.errors import PdbgymError
from pdbgym.train.checkpoints import (
    TENSORBOARD_DIR,
    checkpoint_step,
    forget_steps_after,
    last_complete_checkpoint,
    tensorboard_callback,
)
from pdbgym.train.grpo.build import build
from pdbgym.train.grpo.choose import RUN_FILE, finish_run
from pdbgym.train.grpo.config import GRPORunConfig
from pdbgym.train.grpo.records import GRPORunRecord, PausedRun
from pdbgym.train.grpo.rollout import EpisodeProgress
from pdbgym.train.grpo.trainer import OUTCOMES_FILE, RANKS_DIR, RECIPE_STATE_FILE, STEPS_FILE, PlayEpisodes
from pdbgym.train.records import LogRow


def _checkpoint_to_resume(config: GRPORunConfig, main: bool = True) -> str | None:
    """The checkpoint to resume from (None for a fresh run); the main process drops the logged steps
    after it. Every process reads; nothing is written before the first step, which needs them all."""
    folder = config.out / "checkpoints"
    last = last_complete_checkpoint(folder, RECIPE_STATE_FILE)
    if config.resume:
        if last is None:
            raise PdbgymError(f"--resume: {folder} holds no checkpoint to resume from; run without --resume")
        if main:
            saved = checkpoint_step(last)
            ranks = sorted((config.out / RANKS_DIR).glob("rank-*.jsonl"))
            for log in [config.out / STEPS_FILE, config.out / OUTCOMES_FILE, *ranks]:
                forget_steps_after(log, saved)
        return last
    if last is not None or (config.out / STEPS_FILE).exists():
        raise PdbgymError(f"{config.out} already holds a GRPO run; pass --resume to continue it or choose a new --out")
    return None


def train_grpo(config: GRPORunConfig, on_log: Callable[[LogRow], None] | None = None,
               play: PlayEpisodes | None = None, progress: EpisodeProgress | None = None
               ) -> GRPORunRecord | PausedRun:
    """Run (or resume) GRPO; return the run record (also written to ``out/grpo_run.json``).

    Under ``accelerate launch`` every process trains; the main one chooses, copies, registers and writes
    the record, and every process returns that record. A run stopped by ``pause_after_minutes`` returns
    ``{"paused": True, "steps": ..., "max_steps": ...}`` and writes no record (``resume`` goes on)."""
    with cudnn_attention(config.cudnn_attention):  # the run's setting, the process's own restored after it
        return _train(config, on_log, play, progress)


def _train(config: GRPORunConfig, on_log: Callable[[LogRow], None] | None, play: PlayEpisodes | None,
           progress: EpisodeProgress | None) -> GRPORunRecord | PausedRun:
    config.out = Path(config.out)
    resume_from = _checkpoint_to_resume(config, main=os.environ.get("RANK", "0") == "0")
    trainer, base, val_tasks = build(config, on_log, play, progress)
    if config.tensorboard:  # event files in out/tensorboard; a resume hides the killed run's later steps
        trainer.add_callback(tensorboard_callback(config.out / TENSORBOARD_DIR,
                                                  checkpoint_step(resume_from) + 1 if resume_from else None))
    trainer.train(resume_from_checkpoint=resume_from)
    if any(getattr(callback, "paused", False) for callback in trainer.callback_handler.callbacks):
        # stopped by pause_after_minutes at a gated checkpoint: nothing chosen or registered until it ends
        return {"paused": True, "steps": int(trainer.state.global_step), "max_steps": int(trainer.state.max_steps)}
    trainer.save_model(str(config.out / "final"))  # a collective under FSDP / ZeRO-3; saved by the main process
    if trainer.is_world_process_zero():
        record = finish_run(config, trainer, base, val_tasks)
    trainer.accelerator.wait_for_everyone()
    if not trainer.is_world_process_zero():
        record = cast(GRPORunRecord, json.loads((config.out / RUN_FILE).read_text()))
    return record
