"""The config of ``pdbgym train dagger``: every field but ``ledger`` and ``report`` is a flag, declared once here
with its help (``pdbgym.commandapp.config_command``); ``episode``'s fields are flags by their own names."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pdbgym.defaults import documented
from pdbgym.episode_defaults import EpisodeSettings, SettingsError, check_setting, episode_defaults_for
from pdbgym.fileio import JSONValue


def sft_fields(text: str) -> dict[str, JSONValue]:
    """``--sft``'s JSON object of ``SFTTrainConfig`` fields; anything else is a ``SettingsError`` saying why."""
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"--sft must be a JSON object ({exc})") from exc
    if not isinstance(fields, dict):
        raise SettingsError(f"--sft must be a JSON object of SFT fields, e.g. '{{\"max_steps\": 20}}', got {text!r}")
    return fields


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

    student: str = documented(help="'embedded', a model folder, or an adapter-store reference")
    teacher: str = documented(help="A model ('embedded', folder, store ref) or an SGLang URL")
    tasks: str = documented(help="Training tasks: suite, task id or folder")
    out: Path = documented(help="Run folder: iter0/, iter1/, ..., iterations.json, report")
    iterations: int = documented(2, "DAgger iterations")
    runs: int = documented(1, "Student episodes per training task per iteration")
    val_tasks: str | None = documented(None, "Tasks for pass@1 of each iterate (held out)")
    splits: Path | None = documented(None, "Split file: refuse val/test tasks in --tasks")
    teacher_cache: Path | None = documented(None, "Teacher cache for KL(teacher||student)")
    eval_runs: int = documented(1, "Episodes per val task per iterate")
    episode: EpisodeSettings = documented(
        episode_defaults_for("train dagger"), "the student's episodes",
        inner={"temperature": "Student sampling temperature", "top_p": None,
               "max_new_tokens": "Token cap of one turn (student and teacher)"})
    teacher_temperature: float = documented(0.0, "Teacher sampling temperature (0: greedy)")
    tokenizer: str = documented("embedded", "Tokenizer of a URL teacher: 'embedded' or a folder")
    device: str = documented("auto", "auto, cpu, cuda")
    seed: int = documented(42, "Seed of sampling and training")
    name_prefix: str | None = documented(None, "Store names PREFIX-iterN (default: out folder name)")
    sft: dict[str, JSONValue] = documented(help="JSON of SFT fields for every iteration, e.g. '{\"max_steps\": 20}'",
                                           factory=dict, text=(json.dumps, sft_fields))
    store: Path | None = documented(None, "Adapter store root")
    ledger: Path | None = documented(None, "selection ledger (default $PDBGYM_HOME's)", cli=False)
    report: bool = documented(True, "write the run's report", cli=False)

    def __post_init__(self) -> None:
        check_setting("runs", self.runs)
        check_setting("eval_runs", self.eval_runs, rule="runs")
        check_setting("teacher_temperature", self.teacher_temperature, rule="temperature")
