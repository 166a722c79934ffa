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
    """Reset, let ``policy`` act until the episode ends, write the transcript, return the result.

    A policy that raises (a person's input ending, a bug in a scripted policy) ends the episode as
    ``other`` with the reason kept; the transcript is still written. Ctrl-C is re-raised after that.
    """
    with DebugEnv(task, config, sandbox) as env:
        observation = env.reset()
        interrupted: KeyboardInterrupt | None = None
        try:
            policy.reset(task, observation)
            done = False
            while not done:
                observation, done, _ = env.step(policy.next_action(observation))
        except KeyboardInterrupt as exc:
            interrupted = exc
            env.terminate("other", f"the {policy.name} policy was interrupted (Ctrl-C)")
        except Exception as exc:  # noqa: BLE001 - any policy failure ends only this episode
            message = f": {exc}" if str(exc) else ""
            env.terminate("other", f"the {policy.name} policy raised {type(exc).__name__}{message}")
        if transcript_path is not None:
            env.write_transcript(transcript_path)
        if interrupted is not None:
            raise interrupted
        assert env.result is not None
        return env.result
