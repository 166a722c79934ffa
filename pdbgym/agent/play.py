"""One episode of any policy by name: scripted, human, embedded, a model folder or a server URL."""

from __future__ import annotations

from pathlib import Path

from pdbgym.env.environment import EnvConfig, EpisodeResult
from pdbgym.errors import PdbgymError
from pdbgym.fileio import write_json_atomic
from pdbgym.tasks.model import Task

ACTION_POLICIES = ("scripted", "human")


def play_episode(task: Task, policy: str, env_config: EnvConfig, transcript_path: Path, *,
                 temperature: float = 0.7, top_p: float = 1.0, max_new_tokens: int = 512,
                 seed: int | None = None) -> EpisodeResult:
    """Play ``task`` once with ``policy`` and write the transcript to ``transcript_path``.

    Action policies (``scripted``, ``human``) drive the environment directly; model policies go through
    the agent loop (token-exact trajectory; the transcript then holds the messages and the environment's
    own transcript).
    """
    if policy in ACTION_POLICIES:
        from pdbgym.agent.human import HumanPolicy
        from pdbgym.agent.scripted import ScriptedPolicy
        from pdbgym.env.runner import run_episode

        actor = ScriptedPolicy(task) if policy == "scripted" else HumanPolicy()
        return run_episode(task, actor, env_config, transcript_path=transcript_path)
    from pdbgym.agent.backends.base import BackendError, SamplingParams
    from pdbgym.agent.loop import AgentConfig
    from pdbgym.agent.policies import build_backend, parse_policy
    from pdbgym.agent.runner import EpisodeJob, run_job

    try:
        spec = parse_policy(policy)
        build_backend(spec)  # load the model or reach the server before the episode starts
    except BackendError as exc:
        raise PdbgymError(f"policy '{policy}': {exc}") from exc
    agent = AgentConfig(sampling=SamplingParams(temperature, top_p, max_new_tokens, seed), dataset="run")
    result = run_job(EpisodeJob(str(task.path), task.instance_id, 0, spec, agent, env_config))
    write_json_atomic(transcript_path, result.transcript)
    return result.episode_result()
