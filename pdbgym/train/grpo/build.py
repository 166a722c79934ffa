"""``build``: everything a GRPO run needs, checked before the first episode: the policy (``sft.base``), TRL's
arguments, the tasks and recipe parts (``grpo.inputs``), the rollout function, the reward functions, the
trainer with its callbacks."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pdbgym.adapters.store import Store
from pdbgym.agent.loop import check_tool_turns
from pdbgym.agent.toolcalls import detect_format
from pdbgym.errors import PdbgymError
from pdbgym.modelload import pick_device
from pdbgym.tasks.model import Task
from pdbgym.train.dora import fuse_dora
from pdbgym.train.grpo.config import GRPORunConfig
from pdbgym.train.grpo.inputs import load_tasks, recipe_parts
from pdbgym.train.grpo.rewards import RewardConfig
from pdbgym.train.grpo.rollout import EpisodeProgress
from pdbgym.train.grpo.steptrace import step_trace
from pdbgym.train.grpo.trainer import (
    STEPS_FILE,
    PdbgymRollout,
    PlayEpisodes,
    StepLogCallback,
    _trainer_class,
    grpo_arguments,
    make_callbacks,
    set_quiet_trl,
)
from pdbgym.train.records import LogRow
from pdbgym.train.sft.base import BaseModel, resolve_base, world_size
from pdbgym.versions import require_training

if TYPE_CHECKING:  # annotations only: TRL loads with the trainer
    from trl import GRPOTrainer


def build(config: GRPORunConfig, on_log: Callable[[LogRow], None] | None = None, play: PlayEpisodes | None = None,
          progress: EpisodeProgress | None = None) -> tuple[GRPOTrainer, BaseModel, list[Task]]:
    """(trainer, base model record, val tasks): everything checked before the first episode runs."""
    require_training()
    from datasets import Dataset  # optional: datasets (pdbgym[train])
    from peft import LoraConfig  # optional: peft (pdbgym[train])
    from transformers import PrinterCallback  # optional: transformers (pdbgym[hf])

    set_quiet_trl()
    device = pick_device(config.device)
    arguments = grpo_arguments(config, device, world_size())  # refuses groups that would straddle processes
    train_tasks, val_tasks = load_tasks(config)
    base = resolve_base(config.policy, Store(config.store) if config.store else Store(), device)
    tokenizer = base.tokenizer
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    parts = recipe_parts(config, tokenizer, base.label)
    tool_format = detect_format(getattr(tokenizer, "chat_template", None))
    if play is None:  # the agent loop lays out the conversation: refused before the model is wrapped
        check_tool_turns(tokenizer, tool_format, base.label)
    rollout = PdbgymRollout({t.instance_id: t for t in train_tasks}, config, parts.state, parts.curriculum,
                            parts.replay, tool_format, play)
    functions, _ = RewardConfig(config.format_weight).functions()
    lora = LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=0.0, use_dora=config.use_dora,
                      target_modules="all-linear", task_type="CAUSAL_LM", bias="none")
    config.out.mkdir(parents=True, exist_ok=True)
    trainer = _trainer_class()(
        model=base.model, reward_funcs=functions, args=arguments,
        train_dataset=Dataset.from_dict({"prompt": [t.instance_id for t in train_tasks]}),
        processing_class=tokenizer, peft_config=lora, rollout_func=rollout)
    _refuse_sharded_parameters(trainer)
    if config.fused_dora:
        fuse_dora(trainer.model)
    # transformers prints each log row as a Python dict on stdout when its bar is off; the steps go to
    # steps.jsonl and pdbgym's own progress, and stdout stays the command's (--json: one JSON document)
    trainer.remove_callback(PrinterCallback)
    trainer.setup_recipe(parts.state, config, parts.anchor, parts.curriculum)
    for callback in make_callbacks(trainer, config, parts.controller, rollout, val_tasks,
                                   StepLogCallback(config.out / STEPS_FILE, on_log)):
        trainer.add_callback(callback)
    if config.trace_step > 0:
        trainer.add_callback(step_trace(config.out, config.trace_step))
    if progress is not None:  # a rollout.EpisodeProgress: phases, episodes and optimizer steps shown
        rollout.progress = progress
        callback = progress.trainer_callback()
        if callback is not None:
            trainer.add_callback(callback)
    return trainer, base, val_tasks


def _refuse_sharded_parameters(trainer: GRPOTrainer) -> None:
    """GRPO's episodes end at different turns on different processes, so each process calls ``generate``
    a different number of times; under FSDP or ZeRO-3 every forward (or every unwrap) gathers parameters
    collectively and the processes would wait on each other forever. DDP (and ZeRO-2) keep whole weights."""
    from trl.distributed import DistributedBackend  # optional: trl (pdbgym[train])

    backend = DistributedBackend(trainer.accelerator)
    if backend.is_fsdp or backend.is_zero3:
        raise PdbgymError("pdbgym train grpo cannot run under FSDP or DeepSpeed ZeRO-3: processes play episodes of "
                          "different lengths, and sharded weights would make every generate call a collective that "
                          "the others never join. Launch it with pdbgym/train/configs/ddp.yaml")
