"""``pdbgym train sft``: a LoRA/DoRA adapter trained by TRL's SFTTrainer on a token-exact corpus.

pdbgym supplies what TRL does not: the base resolved from a folder, the embedded model or an
adapter-store reference (its stack merged in memory); the corpus's tokenizer checked against the base's;
a held-out slice by task id; the best checkpoint's choice written to the selection ledger; the recipe,
corpus hash and base fingerprint beside the adapter (``pdbgym_train.json``); the adapter registered in
the store with its parent; a killed run resumed from its last complete checkpoint (``sft.resume``).
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdbgym.adapters.operations import load_recipe, lookup, register_path, resolve_parent
from pdbgym.adapters.peft_format import is_adapter_folder
from pdbgym.adapters.stacked import is_store_ref, load_stacked_model
from pdbgym.adapters.store import Store
from pdbgym.evaluate.selection import SelectionLedger, record_selection, task_set_id
from pdbgym.fileio import write_json_atomic
from pdbgym.modelload import LoadedModel, load_model
from pdbgym.train import seams
from pdbgym.train.checkpoints import TENSORBOARD_DIR, TRAINER_STATE, tensorboard_callback
from pdbgym.train.corpus.build import check_corpus_tokenizer, load_corpus, split_by_task
from pdbgym.train.errors import TrainError
from pdbgym.train.report import write_training_report
from pdbgym.train.sft.config import SFTTrainConfig
from pdbgym.train.sft.resume import (
    ADAPTER_DIR,
    CHECKPOINTS_DIR,
    METRICS_FILE,
    TRAIN_RECORD,
    Start,
    check_out,
    is_finished,
    name_is_ours,
    open_run,
    read_rows,
)
from pdbgym.versions import require_training

SELECTION_SPLIT = "sft-val"
LogHook = Callable[[dict[str, Any], int], None]  # (logged row with its step, total optimizer steps)


BaseModel = LoadedModel
"""The model training starts from: weights, tokenizer, the store id of those exact weights (``parent_id``),
a label and the folder they came from (None for a stack merged in memory): ``pdbgym.modelload.LoadedModel``."""


@dataclass
class SFTResult:
    """What ``train_sft`` produced. Losses in nats per loss token; ``best_step`` is an optimizer step."""

    out: Path
    adapter_dir: Path
    node_id: str | None
    name: str | None
    parent_id: str
    best_val_loss: float | None
    best_step: int | None
    steps: int
    tensor_count: int
    history: list[dict[str, Any]] = field(default_factory=list)
    report: Path | None = None


def pick_device(device: str) -> str:
    """``auto``: this process's GPU (``cuda:LOCAL_RANK`` under accelerate/torchrun) when there is one, else cpu."""
    import torch  # optional: torch (pdbgym[hf])

    if device != "auto":
        return device
    if not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{os.environ['LOCAL_RANK']}" if "LOCAL_RANK" in os.environ else "cuda"


def world_size() -> int:
    """Training processes (accelerate / torchrun set WORLD_SIZE); 1 for a plain run."""
    return int(os.environ.get("WORLD_SIZE", "1"))


class StoreLineage:
    """An adapter store as the model loader's lineage (``pdbgym.modelload.ModelLineage``): store names,
    hashes and registered adapter folders load as their stack merged in memory; a model folder's parent id
    is its weights' id, the folder registered as a base when new (or the stack a merged folder holds)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.where = f"the adapter store at {store.root}"

    def claims(self, ref: str) -> bool:
        path = Path(ref).expanduser()
        if path.exists():
            return path.is_dir() and is_adapter_folder(path)
        return is_store_ref(ref, self.store)

    def load(self, ref: str, device: str, dtype: Any) -> LoadedModel:
        node_id = lookup(self.store, ref)  # an unregistered adapter folder is refused here, with the register command
        stacked = load_stacked_model(node_id, self.store, device, dtype)
        return LoadedModel(stacked.model, stacked.tokenizer, stacked.node_id, self.store.label(node_id), None)

    def parent_of(self, folder: Path) -> str:
        if not folder.is_dir():
            raise TrainError(f"{folder} is a single file; the adapter store records bases as Hugging Face model "
                             "folders: give the folder (config.json + weights), 'embedded', or a store reference")
        return resolve_parent(self.store, str(folder), [])


def resolve_base(ref: str, store: Any, device: str) -> BaseModel:
    """``embedded``, a HF model folder (registered as a base if new), a registered adapter folder, or a
    store reference (name / hash) whose whole chain is merged in memory: ``pdbgym.modelload.load_model``
    with this store as the lineage; ``parent_id`` is what the trained adapter records as its parent."""
    base = load_model(ref, device, lineage=StoreLineage(store), parent=True)
    if base.path is None:  # a stack merged in memory: PEFT wraps it for training
        base.model.train()
    return base


def prepare_examples(examples: list[dict[str, Any]], max_tokens: int) -> list[dict[str, Any]]:
    """``{input_ids, assistant_masks}`` rows for TRL, cut to ``max_tokens`` ids (0: uncut); rows left
    without a loss id are dropped."""
    rows = []
    for example in examples:
        ids, mask = example["input_ids"], example["assistant_masks"]
        if max_tokens:
            ids, mask = ids[:max_tokens], mask[:max_tokens]
        if any(mask):
            rows.append({"input_ids": ids, "assistant_masks": mask})
    return rows


def log_row(step: int, logs: dict[str, Any]) -> dict[str, Any]:
    """The metrics.jsonl row of one ``Trainer.log`` call: its step and the numeric values logged."""
    return {"step": int(step), **{k: v for k, v in logs.items() if k != "step" and isinstance(v, int | float)}}


def _progress_callback(metrics_path: Path, on_log: LogHook | None, rows: list[dict[str, Any]]) -> Any:
    from transformers import TrainerCallback  # optional: transformers (pdbgym[hf])

    class PdbgymLog(TrainerCallback):
        """Every logged row (train loss, eval loss, lr, ...) appended to metrics.jsonl with its step;
        ``rows`` starts with those a resumed checkpoint already holds."""

        def __init__(self) -> None:
            self.rows: list[dict[str, Any]] = list(rows)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
            if not state.is_world_process_zero:
                return
            row = log_row(state.global_step, logs or {})
            self.rows.append(row)
            with open(metrics_path, "a") as handle:
                handle.write(json.dumps(row) + "\n")
            if on_log is not None:
                on_log(row, int(state.max_steps))

    return PdbgymLog()


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


def sft_arguments(config: SFTTrainConfig, out: Path, device: str, has_val: bool, processes: int = 1) -> Any:
    """TRL ``SFTConfig`` for the run (see ``SFTTrainConfig`` for what each field means)."""
    from trl import SFTConfig  # optional: trl (pdbgym[train])

    check_steps(config, has_val, processes)
    per_step = config.micro_batch * processes
    save_steps = config.checkpoint_every
    kwargs: dict[str, Any] = dict(
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
        logging_steps=1, disable_tqdm=True,
        report_to=[], bf16=device.startswith("cuda"),  # TensorBoard: a callback writing to out/tensorboard
        use_cpu=device == "cpu", dataset_num_proc=None,
    )
    if config.packing:
        kwargs["packing_strategy"] = "bfd"
    kwargs.update(config.extra)
    return SFTConfig(**kwargs)


def _lora_config(config: SFTTrainConfig) -> Any:
    from peft import LoraConfig  # optional: peft (pdbgym[train])

    return LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=0.0, use_dora=config.use_dora,
                      target_modules=list(config.target_modules), task_type="CAUSAL_LM", bias="none")


def build_trainer(config: SFTTrainConfig, base: BaseModel, train_rows: list[dict], val_rows: list[dict],
                  device: str, callbacks: list[Any] | None = None) -> Any:
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
        return _finished(config, out)
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
    logger = _progress_callback(out / METRICS_FILE, on_log, start.rows)
    callbacks = [logger]
    if config.tensorboard:
        callbacks.append(tensorboard_callback(out / TENSORBOARD_DIR, start.step + 1 if config.resume else None))
    trainer = build_trainer(config, base, train_rows, val_rows, device, callbacks)
    _train(trainer, start)
    adapter_dir = out / ADAPTER_DIR
    trainer.save_model(str(adapter_dir))  # a collective under FSDP / ZeRO-3: every process calls it
    best_loss, best_step = _best(trainer.state)
    result = SFTResult(out, adapter_dir, None, name if config.register else None, base.parent_id, best_loss,
                       best_step, int(trainer.state.global_step), 0, logger.rows)
    if not trainer.is_world_process_zero():
        return result  # one process records, registers and reports
    trainer.state.save_to_json(str(adapter_dir / "trainer_state.json"))
    result.tensor_count = _tensor_count(adapter_dir)
    val_tasks = sorted({e["instance_id"] for e in val_examples})
    record = _train_record(config, corpus, base, result, val_tasks, len(train_rows), len(val_rows))
    if config.register:
        result.node_id = _register(store, adapter_dir, base.parent_id, name, record["recipe"])
    if val_tasks and best_step is not None and config.register:
        _record_selection(config, name, logger.rows, best_step, val_tasks)
    record.update(store_id=result.node_id, name=result.name)
    write_json_atomic(adapter_dir / TRAIN_RECORD, record, indent=2)  # last: its presence marks the run finished
    if config.report:
        result.report = _report(out, name, result, record)
    return result


def _train(trainer: Any, start: Start) -> None:
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


def _finished(config: SFTTrainConfig, out: Path) -> SFTResult:
    """The result of a run that finished before (``--resume`` of it changes nothing)."""
    record = json.loads((out / ADAPTER_DIR / TRAIN_RECORD).read_text())
    result = SFTResult(out, out / ADAPTER_DIR, record.get("store_id"), record.get("name"), record["base"]["parent_id"],
                       record["best_val_loss"], record["best_step"], record["steps"], record["tensor_count"],
                       read_rows(out))
    if config.report:
        result.report = _report(out, record.get("name") or out.name, result, record)
    return result


def _report(out: Path, name: str, result: SFTResult, record: dict[str, Any]) -> Path:
    return write_training_report(out, f"pdbgym SFT: {name}", result.history, _summary(result, record))


def _best(state: Any) -> tuple[float | None, int | None]:
    evals = [(float(e["eval_loss"]), int(e["step"])) for e in state.log_history if "eval_loss" in e]
    if not evals:
        return None, None
    loss, step = min(evals, key=lambda pair: (pair[0], pair[1]))
    return loss, step


def _tensor_count(adapter_dir: Path) -> int:
    from safetensors import safe_open  # optional: safetensors (pdbgym[hf])

    with safe_open(str(adapter_dir / "adapter_model.safetensors"), framework="pt") as handle:
        return len(list(handle.keys()))


def _train_record(config: SFTTrainConfig, corpus: Any, base: BaseModel, result: SFTResult, val_tasks: list[str],
                  train_rows: int, val_rows: int) -> dict[str, Any]:
    import peft  # optional: peft (pdbgym[train])
    import transformers  # optional: transformers (pdbgym[hf])
    import trl  # optional: trl (pdbgym[train])

    recipe = config.recipe()
    recipe["corpus_hash"] = corpus.manifest["content_hash"]
    return {
        "format": "pdbgym-train-record/1", "kind": "sft", "recipe": recipe,
        "corpus": {"path": str(corpus.path), "content_hash": corpus.manifest["content_hash"],
                   "examples_train": train_rows, "examples_val": val_rows, "val_tasks": val_tasks},
        "base": {"ref": config.base, "parent_id": base.parent_id, "label": base.label,
                 "path": str(base.path) if base.path else None, "tokenizer_fingerprint": corpus.fingerprint},
        "best_val_loss": result.best_val_loss, "best_step": result.best_step, "steps": result.steps,
        "tensor_count": result.tensor_count,
        "versions": {"trl": trl.__version__, "peft": peft.__version__, "transformers": transformers.__version__},
    }


def _register(store: Any, adapter_dir: Path, parent_id: str, name: str, recipe: dict[str, Any]) -> str:
    registration = register_path(store, adapter_dir, parent_id, [name], load_recipe(None, recipe))
    return str(registration.record["id"])


def _record_selection(config: SFTTrainConfig, name: str, rows: list[dict[str, Any]], best_step: int,
                      val_tasks: list[str]) -> None:
    """Scores are negative validation losses per checkpoint; the kept one carries the adapter's name.

    The ledger's ``score_se`` is in solve-rate units; a loss-based choice has none, so 0 is recorded:
    a later report of this adapter on these tasks is still refused, with no inflation estimate."""
    scores = {(name if int(r["step"]) == best_step else f"{name}@step{r['step']}"): -float(r["eval_loss"])
              for r in rows if "eval_loss" in r}
    ledger = SelectionLedger(config.ledger)
    done = [e for e in ledger.entries() if e.split == SELECTION_SPLIT and e.task_set == task_set_id(val_tasks)
            and e.chosen == name and e.scores == scores]
    if not done:  # a resumed run that recorded it before its kill records it once
        record_selection(SELECTION_SPLIT, val_tasks, scores, 0.0, ledger)


def _summary(result: SFTResult, record: dict[str, Any]) -> dict[str, Any]:
    return {"adapter": str(result.adapter_dir), "store id": (result.node_id or "-")[:12], "parent": result.parent_id[:12],
            "best val loss": result.best_val_loss, "best step": result.best_step, "steps": result.steps,
            "tensors": result.tensor_count, "corpus hash": record["corpus"]["content_hash"][:12],
            "val tasks": len(record["corpus"]["val_tasks"])}
