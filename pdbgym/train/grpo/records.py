"""What GRPO's stages hand each other and write: an episode's facts, the rows of ``outcomes.jsonl`` and
``gates.jsonl``, and the run record ``grpo_run.json``. Light on purpose: the report reads them without
loading the trainer."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from pdbgym.reportkit import EstimateDict
from pdbgym.train.gradguard import GuardSummary
from pdbgym.train.records import Setting


class EpisodeFacts(TypedDict):
    """What GRPO keeps of a finished episode beside its ids: the reward functions' columns, the recipe's
    counters and the step's logged metrics read these (``sample_from_outcome``, ``data.replay_sample``)."""

    instance_id: str
    final_test_passed: bool
    termination_reason: str
    grade_refused: bool  # the grading refused the run's verdict (an abnormal end), the episode not tampered
    turns: int
    valid_tool_call_rate: float
    model_seconds: NotRequired[float]  # waiting for turns (played episodes only)
    env_seconds: NotRequired[float]  # in the sandbox (played episodes only)
    replayed: NotRequired[bool]  # a solved corpus trajectory replayed into the group


class EpisodeOutcomeRow(TypedDict):
    """One episode of an ``outcomes.jsonl`` row: its task, whether its final tests passed, whether it was
    replayed from the corpus, how it ended and whether its grading refused the verdict (not tampered)."""

    task: str
    solved: bool
    replayed: bool
    reason: str | None
    refused: bool


class StepOutcomes(TypedDict):
    """One row of ``outcomes.jsonl``: every episode of an optimizer step (all processes')."""

    step: int
    episodes: list[EpisodeOutcomeRow]


class GateRow(TypedDict):
    """One line of ``gates.jsonl``: a checkpoint's val score (``valgate.score_outcomes``), pass@1 (mean, CI
    over tasks) and pass@k from ``runs`` episodes a task (a run from before the counts of how episodes ended
    lacks them; ``refused``: episodes whose grading refused the verdict, an abnormal end, not tampered)."""

    step: int
    checkpoint: str
    pass_at_1: EstimateDict
    pass_at_k: EstimateDict
    k: int
    runs: int
    termination_reasons: NotRequired[dict[str, int]]
    refused: NotRequired[int]


class SignalCounts(TypedDict):
    """The run record's reward-spread counts (``choose.signal_counts``)."""

    reward_signal_steps: int
    replay_only_signal_steps: int
    trl_reward_spread_steps: int


class GRPORunRecord(SignalCounts):
    """``grpo_run.json``, written when a run finishes (``choose.finish_run``)."""

    format: str
    kind: str
    recipe: dict[str, Setting]
    parent_id: str | None
    policy: str
    chosen: str  # "final" or a checkpoint folder's name
    gate: GateRow | None  # the chosen checkpoint's gate; None without val tasks
    steps: int
    store_id: str | None  # None when the delta was not registered
    name: str
    adapter: str
    registered: bool
    registered_without_signal: bool
    rollout_weights: str
    nonfinite_skipped_steps: list[int]
    nonfinite: NotRequired[GuardSummary]  # this invocation's skipped steps, when there were any
    warning: NotRequired[str]


class PausedRun(TypedDict):
    """What ``train_grpo`` returns for a run stopped by ``pause_after_minutes`` (it writes no record)."""

    paused: Literal[True]
    steps: int
    max_steps: int
