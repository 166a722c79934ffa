"""What the executor moves: ``EpisodeJob`` (one episode to play) and ``JobResult`` (what comes back).

Both sit below the executor (which places and runs jobs) and the runner (which plans, plays and saves
them), so neither of those two imports the other for its types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdbgym.env.environment import EpisodeResult

if TYPE_CHECKING:  # for the annotations only: policies loads the model backends (torch) when imported
    from pdbgym.agent.backends.base import EpisodeTranscript
    from pdbgym.agent.loop import AgentConfig
    from pdbgym.agent.policies import PolicySpec
    from pdbgym.env.environment import EnvConfig
    from pdbgym.rollouts.record import RolloutRecord


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to play: picklable, so it can travel to a worker process or a Ray node."""

    task_path: str
    instance_id: str
    sample_idx: int
    policy: PolicySpec
    agent: AgentConfig
    env: EnvConfig


@dataclass
class JobResult:
    """What a worker sends back: the record, the transcript, timings (s)."""

    instance_id: str
    sample_idx: int
    record: RolloutRecord
    transcript: EpisodeTranscript
    model_seconds: float
    env_seconds: float
    wall_seconds: float
    interrupted: bool = False  # a person pressed Ctrl-C at their turn; the episode ended as ``other``

    def episode_result(self) -> EpisodeResult:
        """The outcome as the environment's ``EpisodeResult`` (what campaigns and ``pdbgym run`` report)."""
        env = self.transcript.get("env")
        env_result = (env.get("result") if env else None) or {}
        return EpisodeResult(self.instance_id, self.transcript["termination_reason"],
                             bool(self.transcript["final_test_passed"]), self.transcript["actions_used"],
                             round(self.wall_seconds, 3), env_result.get("detail", ""),
                             env_result.get("grading", {}), env_result.get("wrong_site"),
                             env_result.get("commands_cut", 0))
