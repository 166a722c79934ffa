"""Run one episode of an action-level policy (scripted, human) and keep its transcript."""

from __future__ import annotations

from pathlib import Path

from pdbgym.agent.policy import Policy
from pdbgym.env.environment import DebugEnv, EnvConfig, EpisodeResult
from pdbgym.sandbox import Sandbox
from pdbgym.tasks.model import Task


def run_episode(
    task: Task,
    policy: Policy,
    config: EnvConfig | None = None,
    *,
    transcript_path: Path | None = None,
    sandbox: Sandbox | None = None,
) -> EpisodeResult:
    """Reset, let ``policy`` act until the episode ends, write the transcript, return the result."""
    with DebugEnv(task, config, sandbox) as env:
        observation = env.reset()
        policy.reset(task, observation)
        done = False
        while not done:
            observation, done, _ = env.step(policy.next_action(observation))
        if transcript_path is not None:
            env.write_transcript(transcript_path)
        assert env.result is not None
        return env.result
