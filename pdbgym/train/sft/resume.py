"""The SFT run folder: an ``out`` holding a run is never overwritten; ``--resume`` continues a killed one
from its last complete checkpoint, ``--restart`` deletes it and starts over.

A resume must be the same run: the recipe, base, corpus and name written to ``pdbgym_sft_run.json`` at
the start are compared with the resuming command's, and any difference is refused by name. The rows of
``metrics.jsonl`` are rewritten from the checkpoint's own log history (TRL's ``trainer_state.json``),
which holds exactly the ``Trainer.log`` calls made before that save; the killed run's later rows,
the end-of-training summary included, are dropped and logged again by the resumed run.

The finishing steps run in this order, each safe to repeat: the adapter is saved, registered in the
store (content-addressed: the same adapter under the same name is one node), its selection recorded in
the ledger (skipped when the ledger already holds the identical selection), and ``pdbgym_train.json``
written last; a run whose record exists is finished, and ``--resume`` of it returns it unchanged.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from pdbgym.adapters.peft_format import adapter_content_hash, is_adapter_folder, load_adapter
from pdbgym.errors import PdbgymError
from pdbgym.fileio import JSONValue, read_jsonl, write_json_atomic, write_text_atomic
from pdbgym.train.checkpoints import (
    TENSORBOARD_DIR,
    checkpoint_step,
    drop_checkpoints_after,
    last_complete_checkpoint,
    logged_history,
)
from pdbgym.train.errors import TrainError
from pdbgym.train.records import LogRow
from pdbgym.train.sft.config import SFTTrainConfig

ADAPTER_DIR = "adapter"
TRAIN_RECORD = "pdbgym_train.json"
METRICS_FILE = "metrics.jsonl"
RUN_FILE = "pdbgym_sft_run.json"
CHECKPOINTS_DIR = "checkpoints"
_RUN_ENTRIES = (RUN_FILE, CHECKPOINTS_DIR, METRICS_FILE, ADAPTER_DIR, TENSORBOARD_DIR)
_REPORT_GLOBS = ("training_report.*", "train_*.png")


class CorpusUse(TypedDict):
    """The corpus an SFT run trained on: where, its content hash, the examples of each slice, the val tasks."""

    path: str
    content_hash: str
    examples_train: int
    examples_val: int
    val_tasks: list[str]


class BaseUse(TypedDict):
    """The model an SFT run started from: the reference given, its store id, label, folder and the
    tokenizer fingerprint its corpus was checked against."""

    ref: str
    parent_id: str | None
    label: str
    path: str | None
    tokenizer_fingerprint: str | None


class SFTTrainRecord(TypedDict):
    """``adapter/pdbgym_train.json``, written last by a finished SFT run (``register.train_record``)."""

    format: str
    kind: str
    recipe: dict[str, JSONValue]  # the config's fields (``SFTTrainConfig.recipe``, caller's TRL extras too)
    corpus: CorpusUse
    base: BaseUse
    best_val_loss: float | None
    best_step: int | None
    steps: int
    tensor_count: int
    versions: dict[str, str]  # library -> version
    store_id: NotRequired[str | None]
    name: NotRequired[str | None]


def read_train_record(out: Path) -> SFTTrainRecord:
    """The record a finished SFT run in ``out`` wrote last (its best val loss and step, steps, store id)."""
    return json.loads((out / ADAPTER_DIR / TRAIN_RECORD).read_text())


@dataclass
class Start:
    """Where training starts: a checkpoint to resume (None: step 0) and the rows logged up to it."""

    checkpoint: str | None = None
    rows: list[LogRow] = field(default_factory=list)

    @property
    def step(self) -> int:
        return checkpoint_step(self.checkpoint) if self.checkpoint else 0


def is_finished(out: Path) -> bool:
    return (out / ADAPTER_DIR / TRAIN_RECORD).is_file()


def held_entries(out: Path) -> list[str]:
    """What of an SFT run ``out`` already holds."""
    return [name for name in _RUN_ENTRIES if (out / name).exists()]


def _identity(config: SFTTrainConfig, name: str) -> dict[str, JSONValue]:
    """What makes two invocations the same run (JSON-normal: compared with the stored copy)."""
    base = Path(config.base).expanduser()
    fields = {"base": str(base.resolve()) if base.exists() else config.base,
              "data": str(Path(config.data).expanduser().resolve()), "name": name, "register": config.register,
              **config.recipe()}
    return json.loads(json.dumps(fields, default=str))


def check_out(config: SFTTrainConfig, out: Path, name: str) -> None:
    """Refuse what would overwrite or misresume a run; changes nothing on disk."""
    if config.resume and config.restart:
        raise TrainError("--resume continues the run in --out and --restart deletes it: give one of them")
    held = held_entries(out)
    if config.restart or (not config.resume and not held):
        return
    if not config.resume:
        state = "a finished" if is_finished(out) else "an unfinished"
        raise TrainError(f"{out} already holds {state} SFT run ({', '.join(held)}); pass --resume to continue it, "
                         "--restart to delete it and start over, or choose a new --out")
    if not (out / RUN_FILE).is_file():
        raise TrainError(f"--resume: {out} holds no SFT run to resume (no {RUN_FILE}); run without --resume")
    stored = json.loads((out / RUN_FILE).read_text())["run"]
    now = _identity(config, name)
    changed = sorted(k for k in stored.keys() | now.keys() if stored.get(k) != now.get(k))
    if changed:
        shown = "; ".join(f"{k}: {stored.get(k)!r} then, {now.get(k)!r} now" for k in changed[:6])
        raise TrainError(f"--resume: {out} holds a run started with other settings ({shown}); resume it with "
                         "the same flags, or pass --restart to start over")


def open_run(config: SFTTrainConfig, out: Path, name: str,
             row_of: Callable[[int, dict[str, float]], LogRow], main: bool = True) -> Start:
    """Clear (``restart``), start, or cut back to the last complete checkpoint (``resume``); after
    ``check_out`` and after the inputs are checked. ``row_of(step, logs)`` makes one metrics row.

    Only the main process (``main``) writes; the others take the same checkpoint and log nothing."""
    if not main:
        return Start(last_complete_checkpoint(out / CHECKPOINTS_DIR) if config.resume else None)
    if config.restart:
        _clear(out)
    out.mkdir(parents=True, exist_ok=True)
    last = last_complete_checkpoint(out / CHECKPOINTS_DIR) if config.resume else None
    drop_checkpoints_after(out / CHECKPOINTS_DIR, checkpoint_step(last) if last else 0)
    if not config.resume or not (out / RUN_FILE).is_file():
        write_json_atomic(out / RUN_FILE, {"format": "pdbgym-sft-run/1", "run": _identity(config, name)}, indent=2)
    if last is None:
        (out / METRICS_FILE).unlink(missing_ok=True)
        return Start()
    rows = [row_of(int(entry["step"]), entry) for entry in logged_history(last)]
    write_text_atomic(out / METRICS_FILE, "".join(json.dumps(row) + "\n" for row in rows))
    return Start(last, rows)


def _clear(out: Path) -> None:
    """Delete what an SFT run wrote in ``out`` (and nothing else there)."""
    for name in _RUN_ENTRIES:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    for pattern in _REPORT_GLOBS:
        for path in out.glob(pattern):
            if path.is_file():
                path.unlink()


def name_is_ours(names: dict[str, str], name: str, out: Path) -> bool:
    """Whether store name ``name`` already points at the adapter this run saved (killed after registering)."""
    folder = out / ADAPTER_DIR
    if name not in names or not is_adapter_folder(folder):
        return False
    try:
        return adapter_content_hash(load_adapter(folder)) == names[name]
    except (PdbgymError, OSError, ValueError):
        return False  # a half-written adapter is not the registered one


def read_rows(out: Path) -> list[LogRow]:
    return cast(list[LogRow], read_jsonl(out / METRICS_FILE).rows)
