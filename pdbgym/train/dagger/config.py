"""The config of ``pdbgym train dagger``: every field is a flag of the same name."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pdbgym.episode_defaults import EpisodeSettings, check_setting, episode_defaults_for
from pdbgym.fileio import JSONValue


@dataclass
class DaggerConfig:
    """Online DAgger: the student rolls out, the teacher labels every student state, SFT on the aggregate.

    Iteration i (0-based): the current student (``student`` for i = 0, else adapter ``iter{i-1}``) plays
    ``runs`` episodes per training task; every assistant turn's context (the student's own history,
    token-exact) is given to the teacher, whose next turn becomes a labelled example; examples of all
    iterations so far are aggregated and an adapter ``iter{i}`` is trained by SFT from the same parent
    as iteration 0 (the student's own weights), so each iterate is one adapter over one parent.

    ``episode`` holds the student's episode settings (its ``max_new_tokens`` caps the teacher's labelling turn
    too); they default to ``pdbgym.episode_defaults.EPISODE``, as every command's, but for
    ``max_context_tokens``: ``DAGGER_MAX_CONTEXT_TOKENS`` (SFT's ``max_length``: a labelled example must fit it
    whole). The student samples with the whole distribution (top-p 1, whatever ``episode.top_p`` says).
    ``teacher_temperature`` is the teacher's labelling draw (0: greedy), not an episode setting.
    """

    student: str
    teacher: str
    tasks: str
    out: Path
    iterations: int = 2
    runs: int = 1
    val_tasks: str | None = None
    splits: Path | None = None
    teacher_cache: Path | None = None
    eval_runs: int = 1
    episode: EpisodeSettings = episode_defaults_for("train dagger")
    teacher_temperature: float = 0.0
    tokenizer: str = "embedded"
    device: str = "auto"
    seed: int = 42
    name_prefix: str | None = None  # store names: {prefix}-iter0, ...; default: the out folder's name
    sft: dict[str, JSONValue] = field(default_factory=dict)  # SFTTrainConfig fields for every iteration (--sft JSON)
    store: Path | None = None
    ledger: Path | None = None
    report: bool = True

    def __post_init__(self) -> None:
        check_setting("runs", self.runs)
        check_setting("eval_runs", self.eval_runs, rule="runs")
        check_setting("teacher_temperature", self.teacher_temperature, rule="temperature")
