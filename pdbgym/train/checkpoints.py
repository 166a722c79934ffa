"""Run-folder helpers shared by SFT and GRPO: the checkpoint to resume from, logs cut back to it, TensorBoard.

A TRL checkpoint ``checkpoint-N`` is complete once a whole ``trainer_state.json`` is in it: transformers
writes that file after the weights, optimizer, scheduler and RNG state, so a kill during a save leaves a
folder without it, or (a kill during that very write) with a file cut short. Rows a killed run logged after its last complete checkpoint describe steps the resumed run
plays again; they are dropped so that every step appears once.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from pdbgym.errors import PdbgymError
from pdbgym.fileio import read_jsonl, write_text_atomic
from pdbgym.train.records import LogRow
from pdbgym.train.seams import tensorboard_callback_class

if TYPE_CHECKING:  # annotations only: transformers loads with the trainer
    from transformers import TrainerCallback

TRAINER_STATE = "trainer_state.json"
TENSORBOARD_DIR = "tensorboard"


def checkpoint_step(path: Path | str) -> int:
    """The optimizer step N of a ``checkpoint-N`` folder."""
    return int(Path(path).name.rsplit("-", 1)[1])


def _checkpoints(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return [p for p in folder.glob("checkpoint-*") if p.is_dir() and p.name.rsplit("-", 1)[1].isdigit()]


def _whole_state(checkpoint: Path) -> bool:
    """Whether the checkpoint's ``trainer_state.json`` is whole: transformers writes it in place, not
    atomically, so a kill during that write leaves a file that exists but does not parse."""
    try:
        json.loads((checkpoint / TRAINER_STATE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return True


def last_complete_checkpoint(folder: Path, *required: str) -> str | None:
    """The highest ``checkpoint-N`` under ``folder`` holding a whole ``trainer_state.json`` and every file
    named in ``required`` (files a trainer subclass writes before transformers' own), or None."""
    found = [p for p in _checkpoints(folder)
             if all((p / name).is_file() for name in (TRAINER_STATE, *required)) and _whole_state(p)]
    return str(max(found, key=checkpoint_step)) if found else None


def drop_checkpoints_after(folder: Path, step: int) -> list[Path]:
    """Remove ``checkpoint-M`` folders with M > ``step`` (a save cut short by a kill); returns them.

    transformers rotates checkpoints by modification time, so a stale half-written folder left beside the
    resumed run's new ones could count as the most recent and protect itself from rotation."""
    stale = [p for p in _checkpoints(folder) if checkpoint_step(p) > step]
    for path in stale:
        shutil.rmtree(path)
    return stale


def forget_steps_after(path: Path, step: int) -> None:
    """Drop JSONL rows whose ``step`` exceeds ``step``: a killed run's unsaved steps are played again."""
    if path.is_file():
        kept = [row for row in read_jsonl(path).rows if row["step"] <= step]
        write_text_atomic(path, "".join(json.dumps(row) + "\n" for row in kept))


def logged_history(checkpoint: Path | str) -> list[LogRow]:
    """TRL's log history as saved in a checkpoint: one dict per ``Trainer.log`` call before the save."""
    state = json.loads((Path(checkpoint) / TRAINER_STATE).read_text())
    return list(state.get("log_history", []))


def tensorboard_callback(folder: Path, purge_step: int | None = None) -> TrainerCallback:
    """A transformers ``TensorBoardCallback`` writing event files to ``folder`` (main process only).

    ``purge_step``: on resume from checkpoint N, N + 1. TensorBoard then hides the events a killed run
    wrote for steps >= N + 1, which the resumed run logs again (``SummaryWriter(purge_step=...)``).
    Tags are transformers' ``train/<metric>`` and ``eval/<metric>``."""
    from transformers.integrations import is_tensorboard_available  # optional: transformers (pdbgym[hf])

    if not is_tensorboard_available():
        raise PdbgymError("--tensorboard needs the tensorboard package: pip install 'pdbgym[train]' (or tensorboard)")
    callback = tensorboard_callback_class(str(folder), purge_step)()
    callback.logging_dir = str(folder)
    return callback
