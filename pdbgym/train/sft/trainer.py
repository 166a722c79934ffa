"""``pdbgym train sft``: a LoRA/DoRA adapter trained by TRL's SFTTrainer on a token-exact corpus.

pdbgym supplies what TRL does not: the base resolved from a folder, the embedded model or an
adapter-store reference (its stack merged in memory; ``sft.base``); the corpus's tokenizer checked against
the base's; a held-out slice by task id; the best checkpoint's choice written to the selection ledger, the
recipe, corpus hash and base fingerprint beside the adapter (``pdbgym_train.json``) and the adapter
registered in the store with its parent (``sft.register``); a killed run resumed from its last complete
checkpoint (``sft.resume``).
Training itself (loop, optimizer, checkpointing, best-checkpoint tracking, resume,
accelerate/DeepSpeed/FSDP) is TRL's and transformers' own.

Output folder::

    pdbgym_sft_run.json     what the run is (recipe, base, corpus, name): a resume must match it
    checkpoints/checkpoint-N  TRL checkpoints every --save-steps (the latest and the best kept)
    metrics.jsonl           one row per Trainer.log call (train loss, eval loss, lr, ...) with its step
    tensorboard/            event files (with --tensorboard)
    adapter/                the best checkpoint's adapter, trainer_state.json, pdbgym_train.json (last)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from pdbgym.adapters.store import Store
from pdbgym.fileio import append_jsonl
from pdbgym.interrupts import Interrupted
from pdbgym.modelload import pick_device
from pdbgym.train import seams
from pdbgym.train.checkpoints import (
    TENSORBOARD_DIR,
    TRAINER_STATE,
    last_complete_checkpoint,
    tensorboard_callback,
)
from pdbgym.train.corpus.build import check_corpus_tokenizer, load_corpus, split_by_task
from pdbgym.train.corpus.example import Example
from pdbgym.train.errors import TrainError
from pdbgym.train.gradguard import GradientGuard, guard_callback
from pdbgym.train.records import LogHook, LogRow
from pdbgym.train.sft.base import BaseModel, resolve_base, world_size
from pdbgym.train.sft.config import SFTTrainConfig
from pdbgym.train.sft.register import SFTResult, finished_result, record_run
from pdbgym.train.sft.resume import (
    ADAPTER_DIR,
    CHECKPOINTS_DIR,
    METRICS_FILE,
    Start,
    check_out,
    is_finished,
    name_is_ours,
    open_run,
)
from pdbgym.versions import require_training

if TYPE_CHECKING:  # annotations only: transformers, TRL and PEFT load with the trainer
    from peft import LoraConfig
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from trl import SFTConfig, SFTTrainer

class TrainRow(TypedDict):
    """One example as TRL's ``SFTTrainer`` gets it: the ids and the mask of those the loss is taken on."""

    input_ids: list[int]
    assistant_masks: list[int]


def prepare_examples(examples: list[Example], max_tokens: int) -> list[TrainRow]:
    """``{input_ids, assistant_masks}`` rows for TRL, cut to ``max_tokens`` ids (0: uncut); rows left
    without a loss id are dropped."""
    rows: list[TrainRow] = []
    for example in examples:
        ids, mask = example.input_ids, example.assistant_masks
        if max_tokens:
            ids, mask = ids[:max_tokens], mask[:max_tokens]
        if any(mask):
            rows.append({"input_ids": ids, "assistant_masks": mask})
    return rows


def log_row(step: int, logs: dict[str, float]) -> LogRow:
    """The metrics.jsonl row of one ``Trainer.log`` call: its step and the numeric values logged."""
    return {"step": int(step), **{k: v for k, v in logs.items() if k != "step" and isinstance(v, int | float)}}


def _progress_callback(metrics_path: Path, on_log: LogHook | None, rows: list[LogRow]
                       ) -> tuple[TrainerCallback, list[LogRow]]:
    """The callback that logs every row, and the list it appends them to (starting with ``rows``)."""
    from transformers import TrainerCallback  # optional: transformers (pdbgym[hf])

    class PdbgymLog(TrainerCallback):
        """Every logged row (train loss, eval loss, lr, ...) appended to metrics.jsonl with its step;
        ``logged`` starts with those a resumed checkpoint already holds."""

        def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                           **kwargs: object) -> None:
            if on_log is not None and state.is_world_process_zero:
                on_log({"step": int(state.global_step)}, int(state.max_steps))

        def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                   logs: dict[str, float] | None = None, **kwargs: object) -> None:
            if not state.is_world_process_zero:
                return
            row = log_row(state.global_step, logs or {})
            logged.append(row)
            append_jsonl(metrics_path, [row])
            if on_log is not None:
                on_log(row, int(state.max_steps))

    logged = list(rows)
    return PdbgymLog(), logged


def check_steps(config: SFTTrainConfig, has_val: bool, processes: int) -> None:
    """Batch and step settings TRL would refuse later, or that would lose the best checkpoint."""
    per_step = config.micro_batch * processes
    if config.effective_batch % per_step:
        raise TrainError(f"--effective-batch {config.effective_batch} is not a multiple of micro batch x processes "
                         f"({per_step}); pick one that divides")
    if has_val and config.eval_steps % config.checkpoint_every:
        raise TrainError(f"--eval-steps {config.eval_steps} is not a multiple of --save-steps {config.save_steps}: "
                         "every evaluated step needs its checkpoint for the best one to be kept; pick one that divides")
    if config.recompute_every < 1:
        raise TrainError(f"--recompute-every {config.recompute_every}: give 1 (every decoder layer) or more")
    if not config.gradient_checkpointing and (config.recompute_every > 1 or config.selective_recompute):
        raise TrainError("--recompute-every and --selective-recompute choose what activation checkpointing "
                         "recomputes; add --gradient-checkpointing")
    if config.selective_recompute and os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3":
        raise TrainError("--selective-recompute needs non-reentrant checkpointing, which PEFT under DeepSpeed "
                         "ZeRO-3 cannot use; drop it or use the FSDP config")


def sft_arguments(config: SFTTrainConfig, out: Path, device: str, has_val: bool, processes: int = 1) -> SFTConfig:
    """TRL ``SFTConfig`` for the run (see ``SFTTrainConfig`` for what each field means)."""
    from trl import SFTConfig  # optional: trl (pdbgym[train])

    check_steps(config, has_val, processes)
    per_step = config.micro_batch * processes
    save_steps = config.checkpoint_every
    kwargs: dict[str, Any] = dict(  # SFTConfig's fields, ours and then the caller's own (``config.extra``)
        output_dir=str(out / CHECKPOINTS_DIR), seed=config.seed, data_seed=config.seed,
        num_train_epochs=config.epochs, max_steps=config.max_steps if config.max_steps > 0 else -1,
        learning_rate=config.lr, lr_scheduler_type="linear", warmup_steps=0,
        per_device_train_batch_size=config.micro_batch, per_device_eval_batch_size=config.micro_batch,
        gradient_accumulation_steps=config.effective_batch // per_step,
        max_length=config.max_length, packing=config.packing, padding_free=config.packing,
        activation_checkpointing=config.gradient_checkpointing,
        activation_checkpointing_kwargs={"every_n_layers": config.recompute_every}
        if config.gradient_checkpointing and config.recompute_every > 1 else None,
        eval_strategy="steps" if has_val else "no", eval_steps=config.eval_steps,
        # Checkpoints more often than evaluations: transformers' load_best_model_at_end forbids that, so the
        # best checkpoint is tracked (metric_for_best_model) and loaded by train_sft after training.
        save_strategy="steps", save_steps=save_steps, save_total_limit=2,
        metric_for_best_model="eval_loss" if has_val else None, greater_is_better=False,
        logging_steps=1, logging_nan_inf_filter=False, disable_tqdm=True,  # a NaN loss is logged as NaN
        report_to=[], bf16=device.startswith("cuda"),  # TensorBoard: a callback writing to out/tensorboard
        use_cpu=device == "cpu", dataset_num_proc=None,
    )
    if config.packing:
        kwargs["packing_strategy"] = "bfd"
    kwargs.update(config.extra)
    return SFTConfig(**kwargs)


def _lora_config(config: SFTTrainConfig) -> LoraConfig:
    from peft import LoraConfig  # optional: peft (pdbgym[train])

    return LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=0.0, use_dora=config.use_dora,
                      target_modules=list(config.target_modules), task_type="CAUSAL_LM", bias="none")


def build_trainer(config: SFTTrainConfig, base: BaseModel, train_rows: list[TrainRow], val_rows: list[TrainRow],
                  device: str, callbacks: list[TrainerCallback] | None = None) -> SFTTrainer:
    """A TRL ``SFTTrainer`` over pre-tokenized rows with a fresh LoRA/DoRA adapter on ``base``."""
    from datasets import Dataset  # optional: datasets (pdbgym[train])
    from transformers import PrinterCallback  # optional: transformers (pdbgym[hf])
    from trl import SFTTrainer  # optional: trl (pdbgym[train])

    args = sft_arguments(config, Path(config.out), device, bool(val_rows), world_size())
    if config.gradient_checkpointing and config.selective_recompute:
        # On the model itself, before PEFT wraps it: TRL's own switch (the kwarg "selective") hands the
        # key to torch's checkpoint with a PEFT model under transformers 5 and fails there.
        from trl.models import enable_selective_activation_checkpointing

        enable_selective_activation_checkpointing(base.model)
    trainer = SFTTrainer(model=base.model, args=args, train_dataset=Dataset.from_list(train_rows),
                         eval_dataset=Dataset.from_list(val_rows) if val_rows else None,
                         processing_class=base.tokenizer, peft_config=_lora_config(config), callbacks=callbacks or [])
    trainer.remove_callback(PrinterCallback)  # progress is pdbgym's (rich), fed by the log callback
    return trainer


def train_sft(config: SFTTrainConfig, on_log: LogHook | None = None,
              base: BaseModel | None = None) -> SFTResult:
    """Train (or resume), keep the best checkpoint, write the adapter and its record, register it, record
    the selection. An ``out`` holding a run needs ``resume`` or ``restart`` (``sft.resume``).

    ``base`` may be given already loaded (DAgger trains every iteration from one parent)."""
    require_training()

    out = Path(config.out)
    store = Store(config.store)
    name = config.name or out.name
    main = os.environ.get("RANK", "0") == "0"  # under accelerate launch the main process alone judges the folder
    if main:
        check_out(config, out, name)
    if config.resume and is_finished(out):
        return finished_result(config, out)
    if config.register and name in store.names() and not (config.resume and name_is_ours(store.names(), name, out)):
        raise TrainError(f"the store at {store.root} already has an artifact named {name!r}; pass --name")
    corpus = load_corpus(config.data)
    device = pick_device(config.device)
    base = base or resolve_base(config.base, store, device)
    check_corpus_tokenizer(corpus, base.tokenizer, base.label)
    train_examples, val_examples = split_by_task(corpus.examples, config.val_fraction, config.seed)
    train_rows = prepare_examples(train_examples, config.max_tokens_per_example)
    val_rows = prepare_examples(val_examples, config.max_tokens_per_example)
    if not train_rows:
        raise TrainError(f"{config.data}: no training example left after the held-out slice and length cut")
    check_steps(config, bool(val_rows), world_size())  # flag errors before the folder changes
    start = open_run(config, out, name, log_row, main)
    logger, logged = _progress_callback(out / METRICS_FILE, on_log, start.rows)
    callbacks = [guard_callback(GradientGuard()), logger]  # the guard marks a skipped step in the row logged
    if config.tensorboard:
        callbacks.append(tensorboard_callback(out / TENSORBOARD_DIR, start.step + 1 if config.resume else None))
    trainer = build_trainer(config, base, train_rows, val_rows, device, callbacks)
    try:
        _train(trainer, start)
    except KeyboardInterrupt:
        raise Interrupted(interrupted_message(out, int(trainer.state.global_step), int(trainer.state.max_steps))) from None
    adapter_dir = out / ADAPTER_DIR
    trainer.save_model(str(adapter_dir))  # a collective under FSDP / ZeRO-3: every process calls it
    best_loss, best_step = _best(trainer.state)
    result = SFTResult(out, adapter_dir, None, name if config.register else None, base.parent_id, best_loss,
                       best_step, int(trainer.state.global_step), 0, logged)
    if not trainer.is_world_process_zero():
        return result  # one process records, registers and reports
    trainer.state.save_to_json(str(adapter_dir / "trainer_state.json"))
    val_tasks = sorted({e.instance_id for e in val_examples})
    return record_run(config, store, name, result, corpus, base, val_tasks, len(train_rows), len(val_rows))


def _train(trainer: SFTTrainer, start: Start) -> None:
    """``trainer.train`` from ``start``, then the best checkpoint's weights loaded (when there was a val slice).

    TRL's token counter (``num_tokens``) is not in its checkpoints: a resumed run continues it from the
    last logged value instead of restarting it at 0."""
    state = json.loads((Path(start.checkpoint) / TRAINER_STATE).read_text()) if start.checkpoint else {}
    if state:  # every process: the counter is a global count
        counts = [row["num_tokens"] for row in state["log_history"] if "num_tokens" in row and "loss" in row]
        seams.set_token_count(trainer, int(counts[-1]) if counts else 0)
    if state and state["global_step"] >= state["max_steps"]:
        # The killed run had trained every step. transformers resumed at max_steps plays the rest of the
        # epoch's batches up to one more step, so the checkpoint is loaded instead of resumed.
        from transformers import TrainerState

        trainer.state = TrainerState.load_from_json(str(Path(start.checkpoint) / TRAINER_STATE))
        seams.load_checkpoint_weights(trainer, start.checkpoint)
    else:
        trainer.train(resume_from_checkpoint=start.checkpoint)
    if trainer.args.metric_for_best_model and trainer.state.best_model_checkpoint:
        # What load_best_model_at_end does, which transformers allows only when saves are as rare as evaluations.
        seams.load_best_model(trainer)


def interrupted_message(out: Path, step: int, max_steps: int) -> str:
    """What a Ctrl-C'd run kept (its last complete checkpoint) and how to go on from it."""
    kept = last_complete_checkpoint(out / CHECKPOINTS_DIR)
    what = f"{Path(kept).name} is kept in {out / CHECKPOINTS_DIR}" if kept else f"no checkpoint was complete yet in {out}"
    return (f"interrupted at step {step} of {max_steps}: {what}; rerun the same command with --resume to go on "
            f"from it (steps after the last checkpoint are trained again)")


def _best(state: TrainerState) -> tuple[float | None, int | None]:
    evals = [(float(e["eval_loss"]), int(e["step"])) for e in state.log_history if "eval_loss" in e]
    if not evals:
        return None, None
    loss, step = min(evals, key=lambda pair: (pair[0], pair[1]))
    return loss, step
