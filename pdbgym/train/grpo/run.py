"""``train_grpo``: build the policy, trainer, rollout and recipe; train (or resume); gate, register.

Output folder::

    checkpoints/checkpoint-N/   TRL checkpoints (adapter, optimizer, RNG, trainer state, recipe state)
    steps.jsonl                 one line per optimizer step: reward terms, KL, beta, turn budget, BC terms
    gates.jsonl                 val pass@1 / pass@k (CIs over tasks) of every checkpoint
    adapter/                    the chosen delta (PEFT DoRA folder), registered with its parent
    grpo_run.json               recipe, parent, chosen checkpoint, store id
    ranks/rank-R.jsonl          several processes: each one's view of every step (its episodes, budget, counters)
    tensorboard/                TensorBoard event files (with --tensorboard)
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pdbgym.adapters.operations import load_recipe, register_path
from pdbgym.adapters.store import Store
from pdbgym.agent.loop import check_tool_turns
from pdbgym.agent.toolcalls import detect_format
from pdbgym.errors import PdbgymError
from pdbgym.evaluate.selection import SelectionLedger, record_selection
from pdbgym.fileio import write_json_atomic
from pdbgym.tasks.suites import resolve_tasks
from pdbgym.train.checkpoints import (
    TENSORBOARD_DIR,
    checkpoint_step,
    forget_steps_after,
    last_complete_checkpoint,
    tensorboard_callback,
)
from pdbgym.train.grpo.config import GRPORunConfig
from pdbgym.train.grpo.data import AnchorBatches, ReplayPool, load_checked_corpus
from pdbgym.train.grpo.rewards import RewardConfig
from pdbgym.train.grpo.schedules import AdaptiveKLController, RecipeState, TurnBudgetCurriculum
from pdbgym.train.grpo.trainer import (
    GATES_FILE,
    RANKS_DIR,
    RECIPE_STATE_FILE,
    STEPS_FILE,
    PdbgymRollout,
    StepLogCallback,
    _trainer_class,
    grpo_arguments,
    make_callbacks,
    set_quiet_trl,
)
from pdbgym.train.grpo.valgate import read_gates
from pdbgym.train.sft.trainer import pick_device, resolve_base, world_size
from pdbgym.versions import require_training

RUN_FILE = "grpo_run.json"
SELECTION_SPLIT = "val"


def _load_tasks(config: GRPORunConfig) -> tuple[list[Any], list[Any]]:
    train = resolve_tasks(config.tasks)
    val = resolve_tasks(config.val_tasks) if config.val_tasks else []
    shared = sorted({t.instance_id for t in train} & {t.instance_id for t in val})
    if shared:
        raise PdbgymError(f"{len(shared)} val task(s) are also training tasks ({', '.join(shared[:3])}); a gate on "
                          "tasks the policy trains on measures nothing. Give disjoint --tasks and --val-tasks")
    if len(train) < config.tasks_per_step:
        raise PdbgymError(f"--tasks-per-step {config.tasks_per_step} exceeds the {len(train)} training task(s)")
    return train, val


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
            for log in [config.out / STEPS_FILE, *sorted((config.out / RANKS_DIR).glob("rank-*.jsonl"))]:
                forget_steps_after(log, saved)
        return last
    if last is not None or (config.out / STEPS_FILE).exists():
        raise PdbgymError(f"{config.out} already holds a GRPO run; pass --resume to continue it or choose a new --out")
    return None


def build(config: GRPORunConfig, on_log: Callable[[dict[str, Any]], None] | None = None,
          play: Callable[..., Any] | None = None, progress: Any = None) -> tuple[Any, Any, list[Any]]:
    """(trainer, base model record, val tasks): everything checked before the first episode runs."""
    require_training()
    from datasets import Dataset  # optional: datasets (pdbgym[train])
    from peft import LoraConfig  # optional: peft (pdbgym[train])

    set_quiet_trl()
    device = pick_device(config.device)
    arguments = grpo_arguments(config, device, world_size())  # refuses groups that would straddle processes
    train_tasks, val_tasks = _load_tasks(config)
    base = resolve_base(config.policy, Store(config.store) if config.store else Store(), device)
    tokenizer = base.tokenizer
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    controller = AdaptiveKLController(config.beta, config.target_kl, config.kl_horizon) \
        if config.kl_mode == "adaptive" else None
    if config.kl_mode not in ("adaptive", "fixed"):
        raise PdbgymError(f"--kl-mode {config.kl_mode!r}: choose adaptive or fixed")
    curriculum = TurnBudgetCurriculum(config.curriculum, config.budget_start, config.budget_end,
                                      config.budget_ramp_steps, config.budget_threshold, config.budget_increment)
    anchor = replay = None
    if config.anchor_data is not None and config.anchor_weight > 0:
        anchor = AnchorBatches(load_checked_corpus(config.anchor_data, tokenizer, base.label), config.anchor_batch,
                               config.anchor_max_tokens, tokenizer.pad_token_id)
    if config.replay_data is not None and config.replay_fraction > 0:
        replay = ReplayPool(load_checked_corpus(config.replay_data, tokenizer, base.label))
    recipe = RecipeState(beta=config.beta, budget_now=curriculum.budget(0))
    tool_format = detect_format(getattr(tokenizer, "chat_template", None))
    if play is None:  # the agent loop lays out the conversation: refused before the model is wrapped
        check_tool_turns(tokenizer, tool_format, base.label)
    rollout = PdbgymRollout({t.instance_id: t for t in train_tasks}, config, recipe, curriculum, replay,
                            tool_format, play)
    functions, _ = RewardConfig(config.format_weight).functions()
    lora = LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=0.0, use_dora=config.use_dora,
                      target_modules="all-linear", task_type="CAUSAL_LM", bias="none")
    config.out.mkdir(parents=True, exist_ok=True)
    trainer = _trainer_class()(
        model=base.model, reward_funcs=functions, args=arguments,
        train_dataset=Dataset.from_dict({"prompt": [t.instance_id for t in train_tasks]}),
        processing_class=tokenizer, peft_config=lora, rollout_func=rollout)
    _refuse_sharded_parameters(trainer)
    trainer.setup_recipe(recipe, config, anchor, curriculum)
    for callback in make_callbacks(trainer, config, controller, rollout, val_tasks,
                                   StepLogCallback(config.out / STEPS_FILE, on_log)):
        trainer.add_callback(callback)
    if progress is not None:  # a rollout.EpisodeProgress: phases, episodes and optimizer steps shown
        rollout.progress = progress
        callback = progress.trainer_callback()
        if callback is not None:
            trainer.add_callback(callback)
    return trainer, base, val_tasks


def _refuse_sharded_parameters(trainer: Any) -> None:
    """GRPO's episodes end at different turns on different processes, so each process calls ``generate``
    a different number of times; under FSDP or ZeRO-3 every forward (or every unwrap) gathers parameters
    collectively and the processes would wait on each other forever. DDP (and ZeRO-2) keep whole weights."""
    from trl.distributed import DistributedBackend  # optional: trl (pdbgym[train])

    backend = DistributedBackend(trainer.accelerator)
    if backend.is_fsdp or backend.is_zero3:
        raise PdbgymError("pdbgym train grpo cannot run under FSDP or DeepSpeed ZeRO-3: processes play episodes of "
                          "different lengths, and sharded weights would make every generate call a collective that "
                          "the others never join. Launch it with pdbgym/train/configs/ddp.yaml")


def train_grpo(config: GRPORunConfig, on_log: Callable[[dict[str, Any]], None] | None = None,
               play: Callable[..., Any] | None = None, progress: Any = None) -> dict[str, Any]:
    """Run (or resume) GRPO; return the run record (also written to ``out/grpo_run.json``).

    Under ``accelerate launch`` every process trains; the main one chooses, copies, registers and writes
    the record, and every process returns that record."""
    config.out = Path(config.out)
    resume_from = _checkpoint_to_resume(config, main=os.environ.get("RANK", "0") == "0")
    trainer, base, val_tasks = build(config, on_log, play, progress)
    if config.tensorboard:  # event files in out/tensorboard; a resume hides the killed run's later steps
        trainer.add_callback(tensorboard_callback(config.out / TENSORBOARD_DIR,
                                                  checkpoint_step(resume_from) + 1 if resume_from else None))
    trainer.train(resume_from_checkpoint=resume_from)
    trainer.save_model(str(config.out / "final"))  # a collective under FSDP / ZeRO-3; saved by the main process
    if trainer.is_world_process_zero():
        record = _finish(config, trainer, base, val_tasks)
    trainer.accelerator.wait_for_everyone()
    if not trainer.is_world_process_zero():
        record = json.loads((config.out / RUN_FILE).read_text())
    return record


def _finish(config: GRPORunConfig, trainer: Any, base: Any, val_tasks: list[Any]) -> dict[str, Any]:
    """Choose the checkpoint, copy its delta to ``adapter/``, register it, write ``grpo_run.json``."""
    chosen, gate = _choose(config, val_tasks, config.name or f"grpo-{config.out.name}")
    adapter_dir = config.out / "adapter"
    if adapter_dir.exists():
        shutil.rmtree(adapter_dir)
    source = config.out / "final" if chosen == "final" else config.out / "checkpoints" / chosen
    adapter_dir.mkdir(parents=True)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy2(source / name, adapter_dir / name)
    node_id = _register(config, adapter_dir, base.parent_id)
    record = {"format": "pdbgym-train-record/1", "kind": "grpo", "recipe": config.recipe(),
              "parent_id": base.parent_id, "policy": config.policy, "chosen": chosen, "gate": gate,
              "steps": int(trainer.state.global_step), "store_id": node_id,
              "name": config.name or f"grpo-{config.out.name}", "adapter": str(adapter_dir)}
    write_json_atomic(config.out / RUN_FILE, record)
    return record


def _choose(config: GRPORunConfig, val_tasks: list[Any], name: str) -> tuple[str, dict[str, Any] | None]:
    """The checkpoint with the best val pass@1, recorded in the selection ledger; the final one without val."""
    gates = read_gates(config.out / GATES_FILE)
    if not val_tasks or not gates:
        return "final", None
    best = max(gates, key=lambda g: (g["pass_at_1"]["mean"], g["step"]))
    # The best goes first: record_selection takes the first of equal scores, and a tie must record this choice.
    scores = {name: best["pass_at_1"]["mean"]} | {f"{name}@{g['checkpoint']}": g["pass_at_1"]["mean"]
                                                 for g in gates if g is not best}
    se = best["pass_at_1"]["se"]
    record_selection(SELECTION_SPLIT, [t.instance_id for t in val_tasks], scores, se if se == se else 0.0,
                     SelectionLedger(config.ledger) if config.ledger else SelectionLedger())
    return best["checkpoint"], best


def _register(config: GRPORunConfig, adapter_dir: Path, parent_id: str) -> str:
    store = Store(config.store) if config.store else Store()
    name = config.name or f"grpo-{config.out.name}"
    recipe = {k: v for k, v in config.recipe().items() if not isinstance(v, dict)}
    recipe.update(seed=config.seed, rank=config.rank, lr=config.lr)
    registration = register_path(store, adapter_dir, parent_id, [name], load_recipe(None, recipe))
    return str(registration.record["id"])
