"""GRPO's phases on screen and its episodes on disk: the ``EpisodeProgress`` that ``pdbgym train grpo`` uses.

Three kinds of bars on a ``pdbgym.progress.progress`` task set (a rich bar on a terminal, plain lines at
least every 30 s otherwise):

- ``step N rollouts``: episodes finished of the step's on-policy episodes (replayed slots are not played);
- ``updates``: optimizer steps done of ``--steps`` (a resumed run starts at its checkpoint's step);
- ``val gate checkpoint-N``: val episodes finished of ``val tasks x --val-runs``.

With ``episodes_dir`` every finished episode's transcript is written, as it finishes, to
``episodes_dir/step-NNNNNN/`` (the step's rollouts) or ``episodes_dir/gate-checkpoint-N/`` (the val gate
of that checkpoint), one ``<index>-<task id>.json`` each. A step played again after a resume replaces its
folder. The training report links them.
"""

from __future__ import annotations

import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.progress import TaskID

from pdbgym.agent.loop import EpisodeOutcome
from pdbgym.fileio import write_json_atomic
from pdbgym.progress import TaskSet
from pdbgym.train.grpo.rollout import EpisodeProgress

if TYPE_CHECKING:  # annotations only: transformers loads with the trainer
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

EPISODES_DIR = "episodes"


def phase_folder(kind: str, step: int) -> str:
    """The folder name of a phase's transcripts: ``step-000012`` or ``gate-checkpoint-12``."""
    return f"step-{step:06d}" if kind == "rollouts" else f"gate-checkpoint-{step}"


def transcript_name(index: int, instance_id: str) -> str:
    """``<index>-<task id>.json``, the task id reduced to a safe file-name alphabet."""
    return f"{index:04d}-{re.sub(r'[^A-Za-z0-9_.-]', '_', instance_id)[:120]}.json"


class GRPOProgress(EpisodeProgress):
    """Shows GRPO's phases on ``bars`` (a ``pdbgym.progress.progress`` task set) and keeps transcripts."""

    def __init__(self, bars: TaskSet, episodes_dir: Path | None = None):
        self.bars = bars
        self.episodes_dir = Path(episodes_dir) if episodes_dir is not None else None
        self._lock = threading.Lock()
        self._bar: TaskID | None = None
        self._folder: Path | None = None
        self._finished = 0  # episodes of the running phase done

    @contextmanager
    def phase(self, kind: str, step: int, total: int) -> Iterator[None]:
        folder = None
        if self.episodes_dir is not None:
            folder = self.episodes_dir / phase_folder(kind, step)
            if folder.exists():  # the step is played again after a resume: its old episodes are not this run's
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
        label = f"step {step} rollouts" if kind == "rollouts" else f"{kind} checkpoint-{step}"
        bar = self.bars.add_task(label, total=total)
        with self._lock:
            self._bar, self._folder, self._finished = bar, folder, 0
        try:
            yield
        finally:
            with self._lock:
                self._bar = self._folder = None
                finished = self._finished
        if finished < total or not total:  # a play function without the per-episode hook still ends full
            self.bars.update(bar, completed=total)
        self.bars.update(bar, visible=False)  # rich: only the running phases stay on screen

    def episode_finished(self, index: int, outcome: EpisodeOutcome) -> None:
        with self._lock:
            bar, folder = self._bar, self._folder
            self._finished += 1
        if folder is not None:
            write_json_atomic(folder / transcript_name(index, str(outcome.transcript.get("instance_id", "task"))),
                              outcome.transcript)
        if bar is not None:
            self.bars.advance(bar)

    def trainer_callback(self) -> TrainerCallback:
        from transformers import TrainerCallback  # optional: transformers (pdbgym[hf])

        bars = self.bars

        class Updates(TrainerCallback):
            """The ``updates`` bar: optimizer steps of ``max_steps``."""

            bar: TaskID | None = None

            def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                               **kwargs: object) -> None:
                self.bar = bars.add_task("updates", total=state.max_steps)
                bars.update(self.bar, completed=state.global_step)

            def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                            **kwargs: object) -> None:
                if self.bar is not None:
                    bars.update(self.bar, completed=state.global_step)

        return Updates()
