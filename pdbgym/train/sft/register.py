"""What a finished SFT run records: ``pdbgym_train.json`` beside the adapter (recipe, corpus hash, base,
best checkpoint, versions), the adapter registered in the store with its parent, the best checkpoint's
choice in the selection ledger, and the run's report. ``register_adapter`` serves GRPO too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pdbgym.adapters.operations import load_recipe, register_path
from pdbgym.adapters.store import Store
from pdbgym.evaluate.selection import SelectionLedger, record_selection
from pdbgym.fileio import JSONValue, write_json_atomic
from pdbgym.reportkit import Cell
from pdbgym.train.corpus.build import Corpus
from pdbgym.train.records import LogRow
from pdbgym.train.report import write_training_report
from pdbgym.train.sft.base import BaseModel
from pdbgym.train.sft.config import SFTTrainConfig
from pdbgym.train.sft.resume import ADAPTER_DIR, TRAIN_RECORD, SFTTrainRecord, read_rows, read_train_record

SELECTION_SPLIT = "sft-val"


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
    history: list[LogRow] = field(default_factory=list)
    report: Path | None = None


def record_run(config: SFTTrainConfig, store: Store, name: str, result: SFTResult, corpus: Corpus, base: BaseModel,
               val_tasks: list[str], train_rows: int, val_rows: int) -> SFTResult:
    """The adapter's record, registration, selection and report (the main process alone calls it)."""
    result.tensor_count = tensor_count(result.adapter_dir)
    record = train_record(config, corpus, base, result, val_tasks, train_rows, val_rows)
    if config.register:
        result.node_id = register_adapter(store, result.adapter_dir, base.parent_id, name, record["recipe"])
    if val_tasks and result.best_step is not None and config.register:
        record_loss_selection(config, name, result.history, result.best_step, val_tasks)
    record["store_id"], record["name"] = result.node_id, result.name
    write_json_atomic(result.adapter_dir / TRAIN_RECORD, record, indent=2)  # last: its presence marks the run finished
    if config.report:
        result.report = write_report(result.out, name, result, record)
    return result


def finished_result(config: SFTTrainConfig, out: Path) -> SFTResult:
    """The result of a run that finished before (``--resume`` of it changes nothing)."""
    record = read_train_record(out)
    result = SFTResult(out, out / ADAPTER_DIR, record.get("store_id"), record.get("name"), record["base"]["parent_id"],
                       record["best_val_loss"], record["best_step"], record["steps"], record["tensor_count"],
                       read_rows(out))
    if config.report:
        result.report = write_report(out, record.get("name") or out.name, result, record)
    return result


def write_report(out: Path, name: str, result: SFTResult, record: SFTTrainRecord) -> Path:
    return write_training_report(out, f"pdbgym SFT: {name}", result.history, _summary(result, record))


def tensor_count(adapter_dir: Path) -> int:
    from safetensors import safe_open  # optional: safetensors (pdbgym[hf])

    with safe_open(str(adapter_dir / "adapter_model.safetensors"), framework="pt") as handle:
        return len(list(handle.keys()))


def train_record(config: SFTTrainConfig, corpus: Corpus, base: BaseModel, result: SFTResult, val_tasks: list[str],
                 train_rows: int, val_rows: int) -> SFTTrainRecord:
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


def register_adapter(store: Store, adapter_dir: Path, parent_id: str, name: str, recipe: Mapping[str, JSONValue]) -> str:
    """The adapter folder registered in ``store`` under ``name`` with its parent and recipe; its store id."""
    registration = register_path(store, adapter_dir, parent_id, [name], load_recipe(None, dict(recipe)))
    return str(registration.record["id"])


def record_loss_selection(config: SFTTrainConfig, name: str, rows: list[LogRow], best_step: int,
                          val_tasks: list[str]) -> None:
    """Scores are negative validation losses per checkpoint; the kept one carries the adapter's name.

    The ledger's ``score_se`` is in solve-rate units; a loss-based choice has none, so 0 is recorded:
    a later report of this adapter on these tasks is still refused, with no inflation estimate."""
    scores = {(name if int(r["step"]) == best_step else f"{name}@step{r['step']}"): -float(r["eval_loss"])
              for r in rows if "eval_loss" in r}
    record_selection(SELECTION_SPLIT, val_tasks, scores, 0.0, SelectionLedger(config.ledger), once=True)


def _summary(result: SFTResult, record: SFTTrainRecord) -> dict[str, Cell]:
    return {"adapter": str(result.adapter_dir), "store id": (result.node_id or "-")[:12], "parent": result.parent_id[:12],
            "best val loss": result.best_val_loss, "best step": result.best_step, "steps": result.steps,
            "tensors": result.tensor_count, "corpus hash": record["corpus"]["content_hash"][:12],
            "val tasks": len(record["corpus"]["val_tasks"])}
